#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""iolensd's /metrics with basic auth, and the settings it refuses at start
(docs/metrics.md#exposing-the-endpoint).

- basic auth: no credentials, a wrong password or a wrong user get 401; the right ones get the
  page;
- refused at start, with the reason and nothing left behind (no pins): a port already in use,
  a world-readable password file, and `tls:` (Debian 12's civetweb crashes on HTTPS requests
  with OpenSSL 3: refused instead), even with a valid certificate made here by openssl;
- a --metrics-listen that is not host:port: a usage error (exit 2) that says what is expected.
"""
import base64
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

sys.dont_write_bytecode = True
import daemon_common as D  # noqa: E402
import e2e_common as E  # noqa: E402

log = E.log


def fetch(url, ctx=None, user=None, password=None, timeout=5):  # noqa: ARG001
    """(status, body) of a GET; status None and the error text when no HTTP answer came."""
    req = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        req.add_header("Authorization", "Basic " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def main():
    args = D.parse_args(workload=False)
    D.require_root()
    ck = E.Checker("daemon_metrics_auth")
    tmp = D.tempdir("auth")
    pem = os.path.join(tmp, "metrics.pem")
    key = os.path.join(tmp, "key.pem")
    crt = os.path.join(tmp, "crt.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", crt], capture_output=True, text=True)
    if r.returncode != 0:
        ck.fatal("openssl req failed: %s" % r.stderr)
    with open(pem, "w") as out:
        out.write(open(crt).read() + open(key).read())
    os.chmod(pem, 0o600)
    pw = os.path.join(tmp, "password")
    with open(pw, "w") as f:
        f.write("c0rrect horse\n")
    os.chmod(pw, 0o600)

    cg = D.Cgroups()
    cg.mkdir("")
    rules = '  - cgroup: {paths: ["%s/*"]}' % cg.rel()
    metrics = ('metrics:\n  listen: "127.0.0.1:0"\n'
               '  basic_auth: {username: prom, password_file: %s}\n' % pw)
    d = D.Daemon(args.iolensd, rules=rules, extra_config=metrics, tag="auth")
    st = d.start(ck)
    ports = st.get("metrics", {}).get("ports") or []
    if len(ports) != 1:
        ck.fatal("status.metrics.ports: expected one port, got %r" % st.get("metrics"))
    port = ports[0]
    url = "http://127.0.0.1:%d/metrics" % port
    status, body = fetch(url, None, "prom", "c0rrect horse")
    ck.eq("the right credentials: status", 200, status)
    ck.check("iolens_build_info{" in body, "no iolens_build_info in the page:\n%s" % body[:500])
    for what, user, password in (("no credentials", None, None),
                                 ("a wrong password", "prom", "wrong"),
                                 ("a wrong user", "root", "c0rrect horse"),
                                 ("a longer password", "prom", "c0rrect horse!")):
        status, _ = fetch(url, None, user, password)
        ck.eq("%s: status" % what, 401, status)
    ck.check(d.alive(), "iolensd died serving those requests:\n%s" % d.log())

    # Refusals: each says why, exits non-zero, leaves no pins.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    open_pw = os.path.join(tmp, "open-password")
    with open(open_pw, "w") as f:
        f.write("x\n")
    os.chmod(open_pw, 0o644)
    cases = [
        ("a port in use", 'metrics:\n  listen: "127.0.0.1:%d"\n' % busy.getsockname()[1],
         "cannot serve there"),
        ("tls, with a valid certificate",
         'metrics:\n  listen: "127.0.0.1:0"\n  tls: {cert_file: %s}\n' % pem,
         "metrics.tls: not available in this build"),
        ("a world-readable password file",
         'metrics:\n  listen: "127.0.0.1:0"\n  basic_auth: {username: u, password_file: %s}\n' %
         open_pw, "readable by every user"),
    ]
    for what, extra, expected in cases:
        bad = D.Daemon(args.iolensd, rules=rules, extra_config=extra, tag="bad")
        bad.spawn()
        try:
            rc = bad.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        ck.check(rc not in (None, 0), "%s: iolensd should refuse to start, exit %r" % (what, rc))
        ck.check(expected in bad.log(), "%s: the log should say %r:\n%s" % (what, expected,
                                                                           bad.log()))
        ck.eq("%s: pins left" % what, None, bad.pins() or None)
    busy.close()
    # A bad --metrics-listen is a usage error, before anything starts.
    r = subprocess.run([args.iolensd, "-c", d.config, "--metrics-listen", "9464"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    ck.eq("--metrics-listen 9464: exit code", 2, r.returncode)
    ck.check("--metrics-listen: expected host:port" in r.stderr,
             "--metrics-listen 9464: the error should say what is expected: %r" % r.stderr)
    rc, _ = d.stop()
    ck.eq("iolensd exit code", 0, rc)
    ck.finish()


if __name__ == "__main__":
    main()
