// SPDX-License-Identifier: Apache-2.0
// The text of `iolens status|jobs|job` on fixed answers, byte for byte, including names that try
// to break the table or the terminal, and answers with fields missing or of the wrong type.
#include <gtest/gtest.h>

#include "control/format.hpp"

using namespace iolens::control;
using nlohmann::json;

namespace {

constexpr uint64_t kStart = 1763773200000000000ULL;  // 2025-11-22T01:00:00Z
constexpr uint64_t kSecond = 1000000000ULL;

json status_sample() {
  return json::parse(R"({
    "version": "0.1.0", "pid": 123, "uptime_s": 3725.5, "cgroup_root": "/sys/fs/cgroup",
    "syscall_hooks": "attached",
    "programs": [
      {"name": "sys_enter", "attached": true, "error": "", "misses": 0},
      {"name": "block_rq_complete", "attached": true, "error": "", "misses": 12345},
      {"name": "sched_process_exit", "attached": false, "error": "permission denied"},
      {"name": "sys_exit", "attached": false, "error": "", "state": "detached"}
    ],
    "maps": [
      {"name": "files", "entries": 10, "max": 65536},
      {"name": "procs", "entries": 7400, "max": 8192}
    ],
    "lost": {"events": 0, "file_records": 0},
    "jobs": {"live": 2, "closed": 5},
    "records": {"files": 1234, "folded": 0},
    "restart": {"resumed": true, "note": "state from /var/lib/iolens"}
  })");
}

json job_entry(const std::string& id, const std::string& state) {
  json j = {{"id", id},
            {"kind", "kubernetes"},
            {"cgroup", "/kubepods.slice/pod1"},
            {"labels", {{"pod_uid", "0f3e"}, {"namespace", "ml"}, {"pod", "trainer-0"}}},
            {"state", state},
            {"start_ns", kStart},
            {"end_ns", nullptr},
            {"processes", 3},
            {"live_processes", 2},
            {"files", 10},
            {"folded_files", 0},
            {"totals",
             {{"reads", 1234},
              {"writes", 12},
              {"bytes_read", 1610612736},
              {"bytes_written", 10485760},
              {"opens", 40},
              {"stats", 5},
              {"seeks", 0},
              {"fsyncs", 2}}}};
  if (state == "closed") {
    j["end_ns"] = kStart + 3725 * kSecond;
    j["live_processes"] = 0;
  }
  return j;
}

json file(const std::string& path, uint64_t pid, uint64_t bytes_read, uint64_t bytes_written) {
  return {{"path", path},
          {"pid", pid},
          {"counters",
           {{"reads", bytes_read / 4096},
            {"writes", bytes_written / 4096},
            {"bytes_read", bytes_read},
            {"bytes_written", bytes_written},
            {"opens", 1}}}};
}

}  // namespace

TEST(ControlFormat, TerminalSafe) {
  EXPECT_EQ("/data/train/000001.npy", terminal_safe("/data/train/000001.npy"));
  EXPECT_EQ("a\\x0ab\\x0d\\x09c", terminal_safe("a\nb\r\tc"));
  EXPECT_EQ("\\x1b[2J\\x7f", terminal_safe("\x1b[2J\x7f"));
  EXPECT_EQ("nul\\x00byte", terminal_safe(std::string("nul\0byte", 8)));
  EXPECT_EQ("a\\\\x0ab", terminal_safe("a\\x0ab"));  // a literal backslash cannot fake an escape
  EXPECT_EQ("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x93\x81",
            terminal_safe("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x93\x81"));
  EXPECT_EQ("\\xff\\xfe", terminal_safe("\xff\xfe"));
  EXPECT_EQ("\\u009b31m", terminal_safe("\xc2\x9b"
                                        "31m"));                              // C1 CSI
  EXPECT_EQ("evil\\u202egpj.exe", terminal_safe("evil\xe2\x80\xaegpj.exe"));  // RTL override
  EXPECT_EQ("\\u2066x\\u2069", terminal_safe("\xe2\x81\xa6x\xe2\x81\xa9"));
  EXPECT_EQ("\\xc0\\xaf", terminal_safe("\xc0\xaf"));                    // overlong '/'
  EXPECT_EQ("\\xe0\\x80\\xaf", terminal_safe("\xe0\x80\xaf"));           // overlong, 3 bytes
  EXPECT_EQ("\\xed\\xa0\\x80", terminal_safe("\xed\xa0\x80"));           // a surrogate
  EXPECT_EQ("\\xf4\\x90\\x80\\x80", terminal_safe("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ("x\\xe2\\x82", terminal_safe("x\xe2\x82"));                  // cut short
  EXPECT_EQ("\\xe2\\x82x", terminal_safe("\xe2\x82x"));
}

TEST(ControlFormat, Status) {
  EXPECT_EQ(
      "iolensd 0.1.0, pid 123, up 1 h 2 min\n"
      "cgroup root    /sys/fs/cgroup\n"
      "syscall hooks  attached\n"
      "programs       sys_enter           OK\n"
      "               block_rq_complete   OK, skipped 12,345 times\n"
      "               sched_process_exit  FAILED: permission denied\n"
      "               sys_exit            detached\n"
      "maps           files  10 / 65,536 (0.0%)\n"
      "               procs  7,400 / 8,192 (90.3%, nearly full)\n"
      "lost           nothing lost\n"
      "jobs           2 live, 5 closed\n"
      "records        1,234 files, 0 folded\n"
      "restart        resumed: state from /var/lib/iolens\n",
      format_status(status_sample()));
}

TEST(ControlFormat, StatusLosses) {
  json s = status_sample();
  s["lost"] = {{"events", 3}, {"file_records", 0}, {"names", 1500}, {"bad", "x"}};
  s["uptime_s"] = 12.5;
  s["syscall_hooks"] = "detached";
  s["restart"] = {{"resumed", false}};
  const std::string text = format_status(s);
  EXPECT_NE(std::string::npos, text.find("iolensd 0.1.0, pid 123, up 12.5 s\n")) << text;
  EXPECT_NE(std::string::npos, text.find("syscall hooks  detached\n")) << text;
  EXPECT_NE(std::string::npos, text.find("lost           events 3, names 1,500\n")) << text;
  EXPECT_NE(std::string::npos, text.find("restart        fresh start\n")) << text;
}

// The front thread's answer while the loop was busy says how old it is; a fresh one does not.
TEST(ControlFormat, StatusAnsweredWhileTheDaemonWasBusy) {
  json s = status_sample();
  s["age_ms"] = 3;
  EXPECT_EQ(0u, format_status(s).find("iolensd 0.1.0, pid 123, up 1 h 2 min\n"));
  s["age_ms"] = 420;
  EXPECT_EQ(0u, format_status(s).find(
                    "iolensd 0.1.0, pid 123, up 1 h 2 min (as of 0.4 s ago: the daemon was busy)\n"))
      << format_status(s);
  s["age_ms"] = "x";
  EXPECT_EQ(0u, format_status(s).find("iolensd 0.1.0, pid 123, up 1 h 2 min\n"));
  // `jobs` the same, on a line of its own after the table.
  json jobs = {{"jobs", json::array()}, {"age_ms", 1500}};
  EXPECT_EQ("no jobs (as of 1.5 s ago: the daemon was busy)\n", format_jobs(jobs));
  jobs["age_ms"] = 2;
  EXPECT_EQ("no jobs\n", format_jobs(jobs));
  jobs["jobs"] = json::array({{{"id", "j"}, {"state", "live"}}});
  const std::string fresh = format_jobs(jobs);
  jobs["age_ms"] = 90;
  EXPECT_EQ(fresh + "(as of 0.1 s ago: the daemon was busy)\n", format_jobs(jobs));
}

TEST(ControlFormat, StatusTiming) {
  json s = status_sample();
  s["timing"] = "off";
  std::string text = format_status(s);
  EXPECT_NE(std::string::npos, text.find("syscall hooks  attached\ntiming         off\n")) << text;
  s["timing"] = "exact";
  s["timing_note"] = "timing off needs close's classic tracepoint: cannot mount tracefs";
  text = format_status(s);
  EXPECT_NE(std::string::npos,
            text.find("timing         exact (timing off needs close's classic tracepoint: "
                      "cannot mount tracefs)\n"))
      << text;
  EXPECT_EQ(std::string::npos, format_status(status_sample()).find("timing")) << "no member";
}

TEST(ControlFormat, StatusRuns) {
  json s = status_sample();
  // Runs off (root ""), or a daemon without them: no line.
  s["runs"] = {{"root", ""}, {"live", 0}};
  EXPECT_EQ(std::string::npos, format_status(s).find("runs")) << format_status(s);
  s["runs"] = {{"root", "/iolens.runs\x1b[31m"}, {"live", 1},    {"ended", 1200},
               {"abandoned", 2},                {"refused", 0}};
  const std::string text = format_status(s);
  EXPECT_NE(std::string::npos,
            text.find("runs           /iolens.runs\\x1b[31m: 1 live, 1,200 ended, 2 abandoned, "
                      "0 refused\n"))
      << text;
}

TEST(ControlFormat, StatusWithFieldsMissingOrWrong) {
  EXPECT_EQ("iolensd\n", format_status(json::object()));
  EXPECT_EQ("iolensd\n", format_status(json()));
  EXPECT_EQ("iolensd\n", format_status(json::array({1, 2})));
  const json s = json::parse(R"({
    "version": 7, "pid": "x", "uptime_s": -1, "programs": [{}, 5, {"name": "p", "attached": "yes"}],
    "maps": [{"name": "m", "entries": 5, "max": 0}, {"entries": -3}],
    "lost": [], "jobs": {"live": 1}, "records": 5, "restart": {}
  })");
  EXPECT_EQ(
      "iolensd 7, up -\n"
      "programs       -  -\n"
      "               -  -\n"
      "               p  -\n"
      "maps           m  5 / 0\n"
      "               -  - / -\n"
      "jobs           1 live, - closed\n"
      "restart        -\n",
      format_status(s));
}

TEST(ControlFormat, Jobs) {
  json jobs = {
      {"jobs", json::array({job_entry("k8s/0f3e", "live"), job_entry("slurm/1234", "closed")})}};
  jobs["jobs"][1]["kind"] = "slurm";
  jobs["jobs"][1]["totals"] = {{"bytes_read", 0}};
  EXPECT_EQ(
      "ID          KIND        STATE   PROCS  FILES      READ   WRITTEN  OPENS\n"
      "k8s/0f3e    kubernetes  live        3     10  1.50 GiB  10.0 MiB     40\n"
      "slurm/1234  slurm       closed      3     10       0 B         -      -\n",
      format_jobs(jobs));
}

TEST(ControlFormat, AJobWhoseRecordIsBeingWrittenSaysSo) {
  // The line iolensd gives such a job: no totals, no files (they come with the record).
  json jobs = {{"jobs", json::array({{{"id", "cgroup/a"}, {"kind", "cgroup"}, {"state", "closed"},
                                      {"processes", 2}, {"writing", true}}})}};
  EXPECT_EQ(
      "ID        KIND    STATE             PROCS  FILES  READ  WRITTEN  OPENS\n"
      "cgroup/a  cgroup  closed (writing)      2      -     -        -      -\n",
      format_jobs(jobs));
}

TEST(ControlFormat, NoJobs) {
  EXPECT_EQ("no jobs\n", format_jobs({{"jobs", json::array()}}));
  EXPECT_EQ("no jobs\n", format_jobs(json::object()));
  EXPECT_EQ("no jobs\n", format_jobs({{"jobs", "none"}}));
}

TEST(ControlFormat, HostileNamesKeepTheTableIntact) {
  json jobs = {
      {"jobs", json::array({job_entry("k8s/a\nb\x1b[2J", "live"), job_entry("x", "live")})}};
  jobs["jobs"][1]["kind"] = "caf\xc3\xa9\xe2\x80\xae";
  const std::string text = format_jobs(jobs);
  EXPECT_EQ(
      "ID                 KIND        STATE  PROCS  FILES      READ   WRITTEN  OPENS\n"
      "k8s/a\\x0ab\\x1b[2J  kubernetes  live       3     10  1.50 GiB  10.0 MiB     40\n"
      "x                  caf\xc3\xa9\\u202e  live       3     10  1.50 GiB  10.0 MiB     40\n",
      text);
}

TEST(ControlFormat, Job) {
  json result = {{"schema", "iolens.job/1"}, {"job", job_entry("k8s/0f3e", "live")}};
  result["processes"] = json::array(
      {{{"pid", 4242},
        {"ppid", 1},
        {"comm", "python3"},
        {"exe", "/usr/bin/python3.11"},
        {"start_ns", kStart},
        {"end_ns", nullptr},
        {"exit_code", nullptr},
        {"counters", {{"reads", 1000}, {"bytes_read", 1610612736}, {"opens", 30}}},
        {"labels", {{"container_id", "abc"}}}},
       {{"pid", 4250},
        {"ppid", 4242},
        {"comm", "pt_data_worker"},
        {"exe", "/usr/bin/python3.11"},
        {"start_ns", kStart},
        {"end_ns", kStart + kSecond},
        {"exit_code", -9},
        {"counters", {{"bytes_read", 0}, {"bytes_written", 10485760}, {"opens", 10}}}}});
  json files = json::array();
  files.push_back(file("/data/small", 4242, 4096, 0));
  files.push_back(file("/data/train.bin", 4242, 1073741824, 0));
  files.push_back(file("/ckpt/model.pt", 4250, 0, 10485760));
  files.push_back(file("/data/b", 4242, 4096, 0));  // ties: by path
  json evil = file(std::string("/data/\xef\xbf\xbd\n.npy"), 4242, 8192, 0);
  evil["path_hex"] = "2f646174612fff0a2e6e7079";  // the exact bytes: "/data/\xff\n.npy"
  files.push_back(evil);
  result["files"] = files;
  result["lost"] = {{"events", 0}, {"file_records", 2}};

  EXPECT_EQ(
      "job            k8s/0f3e\n"
      "kind           kubernetes\n"
      "cgroup         /kubepods.slice/pod1\n"
      "labels         namespace=ml, pod=trainer-0, pod_uid=0f3e\n"
      "state          live, started 2025-11-22T01:00:00Z, running for 1 h 2 min\n"
      "processes      3, 2 live\n"
      "files          10, 0 folded\n"
      "lost           file_records 2\n"
      "totals         read 1.50 GiB in 1,234 calls, wrote 10.0 MiB in 12 calls\n"
      "               40 opens, 5 stats, 0 seeks, 2 fsyncs\n"
      "\n"
      "processes\n"
      " PID  PPID  COMM                READ   WRITTEN  OPENS     EXIT  EXE\n"
      "4242     1  python3         1.50 GiB         -     30  running  /usr/bin/python3.11\n"
      "4250  4242  pt_data_worker       0 B  10.0 MiB     10       -9  /usr/bin/python3.11\n"
      "\n"
      "top 4 of 5 files by bytes\n"
      "    READ   WRITTEN    READS  WRITES   PID  PATH\n"
      "1.00 GiB       0 B  262,144       0  4242  /data/train.bin\n"
      "     0 B  10.0 MiB        0   2,560  4250  /ckpt/model.pt\n"
      "8.00 KiB       0 B        2       0  4242  /data/\\xff\\x0a.npy\n"
      "4.00 KiB       0 B        1       0  4242  /data/b\n",
      format_job(result, kStart + 3725 * kSecond, 4));
}

// A live job's answer cut from a snapshot taken for an earlier request says how old it is, once
// that is a second (docs/control.md#live-jobs).
TEST(ControlFormat, JobAnsweredFromAnOlderSnapshot) {
  json result = {{"schema", "iolens.job/1"}, {"job", job_entry("k8s/0f3e", "live")}};
  const std::string fresh = format_job(result, kStart + 3725 * kSecond);
  EXPECT_EQ(fresh.find("as of"), std::string::npos) << fresh;
  result["age_ms"] = 999;
  EXPECT_EQ(fresh, format_job(result, kStart + 3725 * kSecond));
  result["age_ms"] = 12400;
  const std::string text = format_job(result, kStart + 3725 * kSecond);
  EXPECT_NE(text.find("running for 1 h 2 min\n"
                      "as of          12.4 s ago (the daemon's last snapshot of the job)\n"
                      "processes"),
            std::string::npos)
      << text;
}

// A record with `by_file` (files across processes) lists those, with the processes of each.
TEST(ControlFormat, JobTopFilesAreFilesAcrossProcessesWhenTheRecordHasThem) {
  json result = {{"job", job_entry("k8s/0f3e", "closed")}, {"processes", json::array()}};
  result["files"] = json::array({file("/data/shared", 1, 4096, 0), file("/data/shared", 2, 8192, 0),
                                 file("/data/own", 1, 8192, 0)});
  json shared = file("/data/shared", 0, 12288, 0);
  shared.erase("pid");
  shared["processes"] = 2;
  json own = file("/data/own", 0, 8192, 0);
  own.erase("pid");
  own["processes"] = 1;
  result["by_file"] = json::array({own, shared});
  const std::string text = format_job(result, 0);
  const auto top = text.find("top 2 of 2 files by bytes (all processes)\n");
  ASSERT_NE(top, std::string::npos) << text;
  EXPECT_EQ(
      "    READ  WRITTEN  READS  WRITES  PROCS  PATH\n"
      "12.0 KiB      0 B      3       0      2  /data/shared\n"
      "8.00 KiB      0 B      2       0      1  /data/own\n",
      text.substr(text.find('\n', top) + 1));
  // no by_file, or not a list (null): the per-process rows, as from an older daemon
  for (const json& none : {json(nullptr), json("x")}) {
    result["by_file"] = none;
    const std::string old = format_job(result, 0);
    EXPECT_NE(old.find(" of 3 files by bytes\n"), std::string::npos) << old;
    EXPECT_NE(old.find("PID"), std::string::npos) << old;
  }
}

TEST(ControlFormat, ClosedJobAndEmptyParts) {
  json result = {{"job", job_entry("slurm/1234", "closed")}, {"files", json::array()}};
  result["job"].erase("labels");
  result["job"]["totals"] = json::object();
  const std::string text = format_job(result, 0);
  EXPECT_EQ(
      "job            slurm/1234\n"
      "kind           kubernetes\n"
      "cgroup         /kubepods.slice/pod1\n"
      "labels         none\n"
      "state          closed, 2025-11-22T01:00:00Z to 2025-11-22T02:02:05Z (1 h 2 min)\n"
      "processes      3, 0 live\n"
      "files          10, 0 folded\n"
      "totals         read - in - calls, wrote - in - calls\n"
      "\n"
      "no files\n",
      text);
}

TEST(ControlFormat, JobFromAnEmptyAnswer) {
  EXPECT_EQ(
      "job            -\n"
      "kind           -\n"
      "cgroup         -\n"
      "labels         none\n"
      "state          -\n"
      "processes      -\n"
      "files          -\n"
      "totals         read - in - calls, wrote - in - calls\n",
      format_job(json(), 0));
}

TEST(ControlFormat, ManyProcessesAreCut) {
  json result = {{"job", job_entry("j", "live")}};
  result["processes"] = json::array();
  for (int i = 0; i < 25; ++i) result["processes"].push_back({{"pid", 100 + i}, {"exit_code", 0}});
  const std::string text = format_job(result, kStart);
  EXPECT_NE(std::string::npos, text.find("\n119     -  -        -        -      -     0  -\n"))
      << text;
  EXPECT_EQ(std::string::npos, text.find("\n120 ")) << text;
  // No "files" in the answer: no files section (not "no files", which would be false).
  EXPECT_EQ(std::string::npos, text.find("files\n")) << text;
  EXPECT_NE(std::string::npos, text.find("\n... 5 more processes (--json lists all)\n")) << text;
}

TEST(ControlFormat, FoldedProcessesAreSaid) {
  json result = {{"job", job_entry("j", "live")}};
  result["job"]["processes"] = 20001;
  result["job"]["live_processes"] = 1;
  result["job"]["folded_processes"] = 19901;
  const std::string text = format_job(result, kStart);
  EXPECT_NE(std::string::npos, text.find("processes      20,001, 1 live, 19,901 folded\n")) << text;
  const json status = {{"records", {{"files", 5}, {"folded", 0}, {"processes_folded", 19901}}}};
  EXPECT_NE(std::string::npos, format_status(status).find("0 folded, 19,901 processes folded"))
      << format_status(status);
}
