// SPDX-License-Identifier: Apache-2.0
// The daemon config: a full file, the defaults, the packaged example, and every error with its
// exact text and position, all reported at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "jobs/config.hpp"
#include "jobs/selector.hpp"
#include "jobs/units.hpp"

using namespace iolens::jobs;
using Strings = std::vector<std::string>;

namespace {

std::vector<std::string> errors_of(const std::string& yaml) {
  return parse_config(yaml, "t.yaml").errors;
}

// The one error `yaml` has (a failure when it has another count).
std::string error_of(const std::string& yaml) {
  const Strings errors = errors_of(yaml);
  EXPECT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  return errors.empty() ? "" : errors.front();
}

// A valid rule list to append to a file that tests something else.
const std::string kJobs = "jobs:\n  - kubernetes: {}\n";

Config parsed(const std::string& yaml) {
  ConfigResult r = parse_config(yaml, "t.yaml");
  EXPECT_TRUE(r.ok()) << ::testing::PrintToString(r.errors);
  return r.config;
}

}  // namespace

// --- units -------------------------------------------------------------------------------------

TEST(JobsUnits, Unsigned) {
  EXPECT_EQ(parse_unsigned("0").value, 0u);
  EXPECT_EQ(parse_unsigned("18446744073709551615").value, 18446744073709551615ull);
  EXPECT_EQ(parse_unsigned("18446744073709551616").error, "too large for 64 bits");
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x10", "1_000", "1e3", "1.0"}) {
    EXPECT_EQ(parse_unsigned(bad).error, "expected digits") << bad;
  }
}

TEST(JobsUnits, Sizes) {
  struct Case {
    std::string text;
    uint64_t bytes;
  };
  for (const Case& c : std::vector<Case>{{"0", 0},
                                         {"12345", 12345},
                                         {"1B", 1},
                                         {"10MB", 10000000},
                                         {"10mb", 10000000},
                                         {"2KB", 2000},
                                         {"2kB", 2000},
                                         {"3GB", 3000000000ull},
                                         {"1TB", 1000000000000ull},
                                         {"1KiB", 1024},
                                         {"512MiB", 512ull << 20},
                                         {"1GiB", 1ull << 30},
                                         {"1 GiB", 1ull << 30},
                                         {"2TiB", 2ull << 40},
                                         {"16777215TiB", 16777215ull << 40}}) {
    const ParsedUnsigned p = parse_size_bytes(c.text);
    EXPECT_TRUE(p.ok()) << c.text << ": " << p.error;
    EXPECT_EQ(p.value, c.bytes) << c.text;
  }
  const std::string expected =
      "expected a size in bytes, or a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";
  for (const char* bad :
       {"", "GiB", "1.5GiB", "1 PB", "1G", "1M", "-1", "1  GiB", "1GiB ", "big"}) {
    EXPECT_EQ(parse_size_bytes(bad).error, expected) << bad;
  }
  EXPECT_EQ(parse_size_bytes("16777216TiB").error, "too large for 64 bits");
}

TEST(JobsUnits, Durations) {
  struct Case {
    std::string text;
    uint64_t ms;
  };
  for (const Case& c : std::vector<Case>{{"0", 0},
                                         {"0s", 0},
                                         {"500ms", 500},
                                         {"2s", 2000},
                                         {"90s", 90000},
                                         {"5m", 300000},
                                         {"12h", 43200000},
                                         {"30d", 2592000000ull},
                                         {"1 d", 86400000}}) {
    const ParsedUnsigned p = parse_duration_ms(c.text);
    EXPECT_TRUE(p.ok()) << c.text << ": " << p.error;
    EXPECT_EQ(p.value, c.ms) << c.text;
  }
  const std::string expected =
      "expected a duration: a number and a unit (ms, s, m, h, d), such as 500ms, 90s, 12h or 30d";
  for (const char* bad : {"", "5", "s", "1.5s", "2S", "1w", "1h30m", "-1s", "soon", "10 secs"}) {
    EXPECT_EQ(parse_duration_ms(bad).error, expected) << bad;
  }
  EXPECT_EQ(parse_duration_ms("213503982335d").error, "too long for 64 bits of milliseconds");
}

// --- valid files -------------------------------------------------------------------------------

TEST(JobsConfig, Defaults) {
  const Config c = parsed(kJobs);
  EXPECT_EQ(c.cgroup_root, "auto");
  EXPECT_EQ(c.output_dir, "/var/lib/iolens/jobs");
  EXPECT_FALSE(c.darshan_logs);
  EXPECT_EQ(c.state_dir, "/var/lib/iolens/state");
  EXPECT_EQ(c.pin_dir, "/sys/fs/bpf/iolens");
  EXPECT_EQ(c.socket_path, "/run/iolens/iolens.sock");
  EXPECT_EQ(c.socket_group, "");
  EXPECT_EQ(c.drain_interval_ms, 1000u);
  EXPECT_EQ(c.grace_s, 120u);
  EXPECT_EQ(c.log_level, "info");
  // Derived from the default memory bound, 256 MiB (jobs/memory_bound.hpp).
  EXPECT_EQ(c.limits.memory, 256ull << 20);
  EXPECT_EQ(c.limits.max_files_per_job, 12700u);
  EXPECT_EQ(c.limits.max_records, 35000u);
  EXPECT_EQ(c.limits.max_path_bytes, 5ull << 20);
  EXPECT_EQ(c.limits.max_path_bytes_per_job, 5ull << 20);
  EXPECT_EQ(c.limits.kernel_file_records, 65536u);
  EXPECT_TRUE(c.limits.kernel_file_records_preallocated);
  EXPECT_FALSE(c.limits.given.kernel_file_records_preallocated);  // the daemon chooses
  EXPECT_EQ(c.limits.kernel_cgroup_exclusions, 65536u);
  EXPECT_EQ(c.limits.kernel_block_records, 16384u);
  EXPECT_EQ(c.limits.kernel_inflight, 0u) << "unset: the object's sizes";
  EXPECT_EQ(c.rotation.max_bytes, 1ull << 30);
  EXPECT_EQ(c.rotation.max_age_s, 30ull * 86400);
  ASSERT_EQ(c.rules.size(), 1u);
  EXPECT_EQ(c.rules[0].kind, RuleKind::Kubernetes);
  EXPECT_EQ(c.rules[0].name, "kubernetes");
  EXPECT_EQ(c.rules[0].roots, (Strings{"/kubepods.slice", "/kubepods"}));
}

TEST(JobsConfig, FullFile) {
  const Config c = parsed(R"(# every key
cgroup_root: /sys/fs/cgroup/unified
output_dir: /data/iolens/jobs
darshan_logs: true
state_dir: /data/iolens/state
pin_dir: /sys/fs/bpf/iolens-test
socket: /run/iolens-test.sock
socket_group: iolens
drain_interval: 500ms
log_level: debug
limits:
  max_files_per_job: 1000
  max_records: 200000
  kernel_file_records: 131072
  kernel_file_records_preallocated: false
  kernel_cgroup_exclusions: 4096
  kernel_block_records: 2048
  kernel_inflight: 64
rotation:
  max_size: 512MiB
  max_age: 12h
grace_period: 90s
jobs:
  - kubernetes:
      roots: [/iolens-test-123]
    name: test-pods
  - slurm: {}
  - name: multi-slurm
    slurm:
      roots:
        - /system.slice/n1_slurmstepd.scope
        - /system.slice/n2_slurmstepd.scope
  - systemd:
      slice: /training.slice
      units: ["train-*.service", "run-*.scope"]
  - cgroup:
      paths:
        - /batch.slice/job-*
        - /batch.slice/array-*/task-[0-9]*
        - /hpc/**/step-?
        - /fixed/job
  - process:
      comm: python3
      cmdline: 'train\.py'
  - name: torchrun
    process: {comm: torchrun}
)");
  EXPECT_EQ(c.cgroup_root, "/sys/fs/cgroup/unified");
  EXPECT_EQ(c.output_dir, "/data/iolens/jobs");
  EXPECT_TRUE(c.darshan_logs);
  EXPECT_EQ(c.state_dir, "/data/iolens/state");
  EXPECT_EQ(c.pin_dir, "/sys/fs/bpf/iolens-test");
  EXPECT_EQ(c.socket_path, "/run/iolens-test.sock");
  EXPECT_EQ(c.socket_group, "iolens");
  EXPECT_EQ(c.drain_interval_ms, 500u);
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.limits.max_files_per_job, 1000u);
  EXPECT_EQ(c.limits.max_records, 200000u);
  EXPECT_EQ(c.limits.kernel_file_records, 131072u);
  EXPECT_FALSE(c.limits.kernel_file_records_preallocated);
  EXPECT_TRUE(c.limits.given.kernel_file_records_preallocated);
  EXPECT_EQ(c.limits.kernel_cgroup_exclusions, 4096u);
  EXPECT_EQ(c.limits.kernel_block_records, 2048u);
  EXPECT_EQ(c.limits.kernel_inflight, 64u);
  EXPECT_EQ(c.rotation.max_bytes, 512ull << 20);
  EXPECT_EQ(c.rotation.max_age_s, 12u * 3600);
  EXPECT_EQ(c.grace_s, 90u);
  ASSERT_EQ(c.rules.size(), 7u);
  EXPECT_EQ(c.rules[0].kind, RuleKind::Kubernetes);
  EXPECT_EQ(c.rules[0].name, "test-pods");
  EXPECT_EQ(c.rules[0].roots, Strings{"/iolens-test-123"});
  EXPECT_EQ(c.rules[1].kind, RuleKind::Slurm);
  EXPECT_EQ(c.rules[1].name, "slurm");
  EXPECT_EQ(c.rules[1].roots, (Strings{"/system.slice/slurmstepd.scope", "/slurm"}));
  EXPECT_EQ(c.rules[2].name, "multi-slurm");
  EXPECT_EQ(c.rules[2].roots,
            (Strings{"/system.slice/n1_slurmstepd.scope", "/system.slice/n2_slurmstepd.scope"}));
  EXPECT_EQ(c.rules[3].kind, RuleKind::Systemd);
  EXPECT_EQ(c.rules[3].slice, "/training.slice");
  EXPECT_EQ(c.rules[3].globs, (Strings{"train-*.service", "run-*.scope"}));
  EXPECT_EQ(c.rules[3].roots, Strings{"/training.slice"});
  EXPECT_EQ(c.rules[4].kind, RuleKind::Cgroup);
  EXPECT_EQ(c.rules[4].name, "cgroup");
  EXPECT_EQ(c.rules[4].globs.size(), 4u);
  EXPECT_EQ(c.rules[4].roots, (Strings{"/batch.slice", "/hpc", "/fixed/job"}));
  EXPECT_EQ(c.rules[5].kind, RuleKind::Process);
  EXPECT_EQ(c.rules[5].name, "process");
  EXPECT_EQ(c.rules[5].comm, "python3");
  EXPECT_EQ(c.rules[5].cmdline, "train\\.py");
  EXPECT_EQ(c.rules[6].name, "torchrun");
  EXPECT_EQ(c.rules[6].comm, "torchrun");
  EXPECT_EQ(c.rules[6].cmdline, "");
  // What the daemon builds from it.
  const Selector s(c.rules);
  EXPECT_EQ(s.watch_roots(),
            (Strings{"/iolens-test-123", "/system.slice/slurmstepd.scope", "/slurm",
                     "/system.slice/n1_slurmstepd.scope", "/system.slice/n2_slurmstepd.scope",
                     "/training.slice", "/batch.slice", "/hpc", "/fixed/job"}));
  EXPECT_EQ(s.process_comms(), (Strings{"python3", "torchrun"}));
}

TEST(JobsConfig, NullsKeepDefaults) {
  const Config c = parsed(R"(output_dir: ~
darshan_logs: ~
socket_group:
log_level: null
limits:
rotation: ~
grace_period: ~
jobs:
  - kubernetes:
  - slurm: ~
    name: ~
  - systemd:
      slice: ~
      units: [x.service]
  - process: {comm: a, cmdline: ~}
)");
  EXPECT_EQ(c.output_dir, "/var/lib/iolens/jobs");
  EXPECT_FALSE(c.darshan_logs);
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.limits.max_records, 35000u);
  ASSERT_EQ(c.rules.size(), 4u);
  EXPECT_EQ(c.rules[0].roots, (Strings{"/kubepods.slice", "/kubepods"}));
  EXPECT_EQ(c.rules[1].name, "slurm");
  EXPECT_EQ(c.rules[2].slice, "/system.slice");
  EXPECT_EQ(c.rules[2].roots, Strings{"/system.slice"});
}

TEST(JobsConfig, OtherValueForms) {
  const Config c = parsed(kJobs + R"(drain_interval_ms: 250
rotation: {max_size: 10000, max_age: 1d}
grace_period: 0
limits: {kernel_file_records: 4294967295, max_records: "18446744073709551615"}
)");
  EXPECT_EQ(c.drain_interval_ms, 250u);
  EXPECT_EQ(c.rotation.max_bytes, 10000u);
  EXPECT_EQ(c.rotation.max_age_s, 86400u);
  EXPECT_EQ(c.grace_s, 0u);
  EXPECT_EQ(c.limits.kernel_file_records, 4294967295u);
  EXPECT_EQ(c.limits.max_records, 18446744073709551615ull);
  EXPECT_EQ(parsed(kJobs + "drain_interval: 49d").drain_interval_ms, 49u * 86400000);
  EXPECT_EQ(parsed(kJobs + "drain_interval: 4294967295ms").drain_interval_ms, 4294967295u);
  EXPECT_EQ(parsed(kJobs).drain_piece_ms, 20u);
  EXPECT_EQ(parsed(kJobs + "drain_piece: 5ms").drain_piece_ms, 5u);
  EXPECT_EQ(parsed(kJobs + "drain_piece: 1s").drain_piece_ms, 1000u);
}

TEST(JobsConfig, PackagedExampleParsesClean) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "../../packaging/iolensd.yaml";
  const ConfigResult r = load_config_file(path.string());
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(r.errors);
  ASSERT_FALSE(r.config.rules.empty());
  EXPECT_EQ(r.config.rules[0].kind, RuleKind::Kubernetes);
  // Its values are the documented defaults.
  const Config defaults;
  EXPECT_EQ(r.config.output_dir, defaults.output_dir);
  EXPECT_EQ(r.config.darshan_logs, defaults.darshan_logs);
  EXPECT_EQ(r.config.state_dir, defaults.state_dir);
  EXPECT_EQ(r.config.pin_dir, defaults.pin_dir);
  EXPECT_EQ(r.config.socket_path, defaults.socket_path);
  EXPECT_EQ(r.config.drain_interval_ms, defaults.drain_interval_ms);
  EXPECT_EQ(r.config.limits.max_files_per_job, defaults.limits.max_files_per_job);
  EXPECT_EQ(r.config.limits.max_records, defaults.limits.max_records);
  EXPECT_EQ(r.config.limits.memory, defaults.limits.memory);
  EXPECT_EQ(r.config.limits.max_path_bytes, defaults.limits.max_path_bytes);
  EXPECT_EQ(r.config.limits.max_path_bytes_per_job, defaults.limits.max_path_bytes_per_job);
  EXPECT_EQ(r.config.limits.kernel_file_records, defaults.limits.kernel_file_records);
  EXPECT_EQ(r.config.rotation.max_bytes, defaults.rotation.max_bytes);
  EXPECT_EQ(r.config.rotation.max_age_s, defaults.rotation.max_age_s);
  EXPECT_NO_THROW(Selector{r.config.rules});
}

TEST(JobsConfig, DocumentedExampleParsesWithTheRootsItStates) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "../../docs/daemon-config.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string open = "## Example\n\n```yaml\n";
  const std::size_t begin = doc.find(open);
  ASSERT_NE(begin, std::string::npos);
  const std::size_t end = doc.find("```", begin + open.size());
  ASSERT_NE(end, std::string::npos);
  const ConfigResult r =
      parse_config(doc.substr(begin + open.size(), end - begin - open.size()), "daemon-config.md");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(r.errors);
  EXPECT_EQ(Selector(r.config.rules).watch_roots(),
            (Strings{"/kubepods.slice", "/kubepods", "/slurm", "/system.slice", "/batch.slice"}));
  EXPECT_EQ(r.config.rotation.max_age_s, 7u * 86400);
}

// --- errors: document level --------------------------------------------------------------------

TEST(JobsConfigErrors, EmptyFile) {
  const std::string empty =
      "t.yaml:1:1: the configuration is empty; it needs at least a jobs: list";
  EXPECT_EQ(error_of(""), empty);
  EXPECT_EQ(error_of("# only a comment\n\n"), empty);
  EXPECT_EQ(error_of("~\n"), empty);
}

TEST(JobsConfigErrors, YamlSyntaxErrorIsOneErrorWithItsPosition) {
  EXPECT_EQ(error_of("log_level: info\njobs: [kubernetes: {}\n"),
            "t.yaml:3:1: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(error_of("limits:\n  max_records: 1\n bad: 2\n"),
            "t.yaml:3:2: invalid YAML: end of map not found");
  EXPECT_EQ(error_of("socket: \"/run/x"), "t.yaml:1:16: invalid YAML: illegal EOF in scalar");
  EXPECT_EQ(error_of("jobs:\n  - kubernetes: {}\n    - slurm: {}\n"),
            "t.yaml:3:5: invalid YAML: end of map not found");
}

TEST(JobsConfigErrors, NotAMap) {
  EXPECT_EQ(error_of("- kubernetes: {}\n"), "t.yaml:1:1: expected a map of settings, got a list");
  EXPECT_EQ(error_of("hello\n"), "t.yaml:1:1: expected a map of settings, got 'hello'");
}

TEST(JobsConfigErrors, SeveralDocuments) {
  EXPECT_EQ(error_of(kJobs + "---\nlog_level: debug\n"),
            "t.yaml:3:1: the file holds more than one YAML document; iolensd reads one");
  EXPECT_EQ(error_of(kJobs + "---\n[\n"),
            "t.yaml:5:1: invalid YAML: end of sequence flow not found");
  // An empty document after the first is harmless.
  EXPECT_TRUE(parse_config(kJobs + "---\n", "t").ok());
  EXPECT_TRUE(parse_config(kJobs + "...\n", "t").ok());
}

// yaml-cpp 0.7's LoadAll never returns on these (jbeder/yaml-cpp#1040).
TEST(JobsConfigErrors, InputThatHangsLoadAllDoesNot) {
  EXPECT_EQ(error_of(","),
            "t.yaml:1:1: the configuration is empty; it needs at least a jobs: list");
  EXPECT_EQ(error_of(",a"),
            "t.yaml:1:1: the configuration is empty; it needs at least a jobs: list");
  EXPECT_TRUE(parse_config("{jobs: [kubernetes: {}]},", "t").ok());
}

TEST(JobsConfigErrors, NoRules) {
  const std::string message = "jobs: no rule; iolensd would trace nothing";
  EXPECT_EQ(error_of("log_level: info\n"), "t.yaml:1:1: " + message);
  EXPECT_EQ(error_of("log_level: info\njobs: []\n"), "t.yaml:2:1: " + message);
  EXPECT_EQ(error_of("log_level: info\njobs:\n"), "t.yaml:2:1: " + message);
  EXPECT_EQ(error_of("log_level: info\njobs: ~\n"), "t.yaml:2:1: " + message);
  EXPECT_EQ(error_of("jobs: {kubernetes: {}}\n"),
            "t.yaml:1:1: jobs: expected a list of rules, got a map");
  EXPECT_EQ(error_of("jobs: kubernetes\n"),
            "t.yaml:1:1: jobs: expected a list of rules, got 'kubernetes'");
}

// --- errors: keys ------------------------------------------------------------------------------

TEST(JobsConfigErrors, UnknownKeysWithSuggestions) {
  EXPECT_EQ(
      error_of(kJobs + "limits:\n  max_file_per_job: 5\n"),
      "t.yaml:4:3: limits: unknown key 'max_file_per_job' (did you mean 'max_files_per_job'?)");
  EXPECT_EQ(error_of(kJobs + "socket_path: /run/x.sock\n"),
            "t.yaml:3:1: unknown key 'socket_path' (did you mean 'socket'?)");
  EXPECT_EQ(error_of(kJobs + "Output-Dir: /x\n"),
            "t.yaml:3:1: unknown key 'Output-Dir' (did you mean 'output_dir'?)");
  EXPECT_EQ(error_of(kJobs + "logLevel: info\n"),
            "t.yaml:3:1: unknown key 'logLevel' (did you mean 'log_level'?)");
  EXPECT_EQ(error_of(kJobs + "rotation: {maxage: 1d}\n"),
            "t.yaml:3:12: rotation: unknown key 'maxage' (did you mean 'max_age'?)");
  // Nothing close, or two equally close: no suggestion.
  EXPECT_EQ(error_of(kJobs + "colour: blue\n"), "t.yaml:3:1: unknown key 'colour'");
  EXPECT_EQ(error_of(kJobs + "limits: {max: 1}\n"), "t.yaml:3:10: limits: unknown key 'max'");
  EXPECT_EQ(error_of(kJobs + "drain: 1s\n"), "t.yaml:3:1: unknown key 'drain'");
  EXPECT_EQ(error_of(kJobs + "? [a, b]\n: 1\n"), "t.yaml:3:3: expected a key name, got a list");
}

TEST(JobsConfigErrors, DuplicateKeys) {
  EXPECT_EQ(error_of(kJobs + "log_level: info\nlog_level: debug\n"),
            "t.yaml:4:1: log_level: set twice; the first is at line 3");
  EXPECT_EQ(error_of(kJobs + "drain_interval: 1s\ndrain_interval_ms: 100\n"),
            "t.yaml:4:1: drain_interval_ms: set either drain_interval or drain_interval_ms, not "
            "both (the other is at line 3)");
}

// --- errors: values ----------------------------------------------------------------------------

TEST(JobsConfigErrors, Integers) {
  EXPECT_EQ(
      error_of(
          "log_level: info\njobs:\n  - kubernetes: {}\n\n\nlimits:\n  max_files_per_job: lots\n"),
      "t.yaml:7:3: limits.max_files_per_job: expected a positive integer, got 'lots'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_records: 0\n"),
            "t.yaml:4:3: limits.max_records: expected a positive integer, got '0'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_records: -5\n"),
            "t.yaml:4:3: limits.max_records: expected a positive integer, got '-5'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_records: 1.5\n"),
            "t.yaml:4:3: limits.max_records: expected a positive integer, got '1.5'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_records: [1]\n"),
            "t.yaml:4:3: limits.max_records: expected a positive integer, got a list");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_records: 18446744073709551616\n"),
            "t.yaml:4:3: limits.max_records: expected a positive integer at most "
            "18446744073709551615, got '18446744073709551616'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  kernel_file_records: 4294967296\n"),
            "t.yaml:4:3: limits.kernel_file_records: expected a positive integer at most "
            "4294967295, got '4294967296'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  kernel_inflight: 0\n"),
            "t.yaml:4:3: limits.kernel_inflight: expected a positive integer, got '0'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  kernel_block_records: 4294967296\n"),
            "t.yaml:4:3: limits.kernel_block_records: expected a positive integer at most "
            "4294967295, got '4294967296'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  kernel_file_records_preallocated: yes\n"),
            "t.yaml:4:3: limits.kernel_file_records_preallocated: expected true or false, got "
            "'yes'");
  EXPECT_EQ(error_of(kJobs + "drain_interval_ms: 4294967296\n"),
            "t.yaml:3:1: drain_interval_ms: expected a positive integer at most 4294967295, got "
            "'4294967296'");
  EXPECT_EQ(error_of(kJobs + "limits: 5\n"), "t.yaml:3:1: limits: expected a map, got '5'");
}

TEST(JobsConfigErrors, SizesAndDurations) {
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_size: 1.5GiB\n"),
            "t.yaml:4:3: rotation.max_size: expected a size in bytes, or a number and a unit (B, "
            "KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '1.5GiB'");
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_size: 0MiB\n"),
            "t.yaml:4:3: rotation.max_size: expected a positive size, got '0MiB'");
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_size: 99999999TiB\n"),
            "t.yaml:4:3: rotation.max_size: too large for 64 bits, got '99999999TiB'");
  const std::string duration =
      "expected a duration: a number and a unit (ms, s, m, h, d), such as 500ms, 90s, 12h or 30d";
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_age: 30\n"),
            "t.yaml:4:3: rotation.max_age: " + duration + ", got '30'");
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_age: 0d\n"),
            "t.yaml:4:3: rotation.max_age: expected a positive duration, got '0d'");
  EXPECT_EQ(error_of(kJobs + "rotation:\n  max_age: 1500ms\n"),
            "t.yaml:4:3: rotation.max_age: expected a whole number of seconds, got '1500ms'");
  EXPECT_EQ(error_of(kJobs + "drain_piece: 1001ms\n"),
            "t.yaml:3:1: drain_piece: expected at most 1s, got '1001ms'");
  EXPECT_EQ(error_of(kJobs + "drain_piece: 0ms\n"),
            "t.yaml:3:1: drain_piece: expected a positive duration, got '0ms'");
  EXPECT_EQ(error_of(kJobs + "drain_interval: soon\n"),
            "t.yaml:3:1: drain_interval: " + duration + ", got 'soon'");
  EXPECT_EQ(error_of(kJobs + "drain_interval: 0ms\n"),
            "t.yaml:3:1: drain_interval: expected a positive duration, got '0ms'");
  EXPECT_EQ(error_of(kJobs + "drain_interval: 50d\n"),
            "t.yaml:3:1: drain_interval: expected at most 4294967295ms (about 49 days), got '50d'");
  EXPECT_EQ(error_of(kJobs + "grace_period: -1s\n"),
            "t.yaml:3:1: grace_period: " + duration + ", got '-1s'");
  EXPECT_EQ(error_of(kJobs + "grace_period: {}\n"),
            "t.yaml:3:1: grace_period: expected a duration such as 30s, got a map");
}

TEST(JobsConfig, RingSizes) {
  const Config d = parsed(kJobs);
  EXPECT_EQ(d.limits.ring_bytes, 16u << 20);
  EXPECT_EQ(d.limits.trace_ring_bytes, 16u << 20);
  const Config c = parsed(kJobs + "limits:\n  ring_size: 64KiB\n  trace_ring_size: 256MiB\n");
  EXPECT_EQ(c.limits.ring_bytes, 64u << 10);
  EXPECT_EQ(c.limits.trace_ring_bytes, 256u << 20);
  EXPECT_EQ(error_of(kJobs + "limits:\n  trace_ring_size: 3MiB\n"),
            "t.yaml:4:3: limits.trace_ring_size: expected a power of two from 4KiB to 2GiB, got "
            "3145728");
  EXPECT_EQ(error_of(kJobs + "limits:\n  trace_ring_size: 2KiB\n"),
            "t.yaml:4:3: limits.trace_ring_size: expected a power of two from 4KiB to 2GiB, got "
            "2048");
  EXPECT_EQ(error_of(kJobs + "limits:\n  ring_size: 4GiB\n"),
            "t.yaml:4:3: limits.ring_size: expected a power of two from 4KiB to 2GiB, got "
            "4294967296");
}

TEST(JobsConfig, ProcessAndPathByteLimits) {
  const Config d = parsed(kJobs);
  EXPECT_EQ(d.limits.max_processes_per_job, 10000u);
  EXPECT_EQ(d.limits.max_path_bytes_per_job, 5u << 20);  // derived (jobs_memory_bound_test.cpp)
  EXPECT_EQ(d.limits.max_path_bytes, 5u << 20);
  const Config c = parsed(kJobs + "limits:\n  max_processes_per_job: 200\n"
                                  "  max_path_bytes_per_job: 1MiB\n  max_path_bytes: 64KiB\n");
  EXPECT_EQ(c.limits.max_processes_per_job, 200u);
  EXPECT_EQ(c.limits.max_path_bytes_per_job, 1u << 20);
  EXPECT_EQ(c.limits.max_path_bytes, 64u << 10);
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_processes_per_job: 0\n"),
            "t.yaml:4:3: limits.max_processes_per_job: expected a positive integer, got '0'");
  EXPECT_EQ(d.limits.max_folded_files_per_job, 250000u);
  EXPECT_EQ(parsed(kJobs + "limits:\n  max_folded_files_per_job: 1000\n")
                .limits.max_folded_files_per_job,
            1000u);
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_folded_files_per_job: -1\n"),
            "t.yaml:4:3: limits.max_folded_files_per_job: expected a positive integer, got '-1'");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_path_bytes_per_job: 1KiB\n"),
            "t.yaml:4:3: limits.max_path_bytes_per_job: expected a size of at least 64KiB, got "
            "1024");
  EXPECT_EQ(error_of(kJobs + "limits:\n  max_path_bytes: lots\n").rfind(
                "t.yaml:4:3: limits.max_path_bytes: expected a size", 0),
            0u);
}

TEST(JobsConfig, DisabledPrograms) {
  EXPECT_TRUE(parsed(kJobs).disabled_programs.empty());
  EXPECT_EQ(parsed(kJobs + "disabled_programs: [block_rq_issue, fault]\n").disabled_programs,
            (std::vector<std::string>{"block_rq_issue", "fault"}));
  EXPECT_EQ(error_of(kJobs + "disabled_programs: fault\n").rfind("t.yaml:3:1: disabled_programs: "
                                                                  "expected a list of optional "
                                                                  "program names",
                                                                  0),
            0u)
      << error_of(kJobs + "disabled_programs: fault\n");
  EXPECT_EQ(error_of(kJobs + "disabled_programs: [\"\"]\n"),
            "t.yaml:3:21: disabled_programs[0]: an empty name");
}

TEST(JobsConfig, SyscallHookModes) {
  EXPECT_EQ(parsed(kJobs).syscall_hooks, "on-demand");
  EXPECT_EQ(parsed(kJobs).hooks_idle_s, 30u);
  EXPECT_EQ(parsed(kJobs + "syscall_hooks: always\nhooks_idle: 2m\n").syscall_hooks, "always");
  EXPECT_EQ(parsed(kJobs + "hooks_idle: 2m\n").hooks_idle_s, 120u);
  EXPECT_EQ(parsed(kJobs + "hooks_idle: 0\n").hooks_idle_s, 0u);
  EXPECT_EQ(error_of(kJobs + "syscall_hooks: sometimes\n"),
            "t.yaml:3:1: syscall_hooks: expected on-demand or always, got 'sometimes'");
}

TEST(JobsConfig, TimingExactOrOff) {
  EXPECT_EQ(parsed(kJobs).timing, "exact");  // the default
  EXPECT_EQ(parsed(kJobs + "timing: exact\n").timing, "exact");
  EXPECT_EQ(parsed(kJobs + "timing: off\n").timing, "off");
  EXPECT_EQ(parsed(kJobs + "timing: \"off\"\n").timing, "off");
  EXPECT_EQ(error_of(kJobs + "timing: sampled\n"),
            "t.yaml:3:1: timing: expected exact or off, got 'sampled'");
  EXPECT_EQ(error_of(kJobs + "timing: Off\n"),
            "t.yaml:3:1: timing: expected exact or off, got 'Off'");
  EXPECT_EQ(error_of(kJobs + "timing: \"\"\n"),
            "t.yaml:3:1: timing: expected exact or off, got ''");
  // A rejected value leaves no half-parsed config: the result is not ok.
  EXPECT_FALSE(parse_config(kJobs + "timing: false\n", "t.yaml").ok());
  EXPECT_EQ(parse_config(kJobs + "timing: [exact]\n", "t.yaml").errors.size(), 1u);
}

TEST(JobsConfig, RecordCompressionZstdOrNone) {
  EXPECT_EQ(parsed(kJobs).record_compression, "zstd");  // the default
  EXPECT_EQ(parsed(kJobs + "record_compression: none\n").record_compression, "none");
  EXPECT_EQ(parsed(kJobs + "record_compression: zstd\n").record_compression, "zstd");
  EXPECT_EQ(error_of(kJobs + "record_compression: gzip\n"),
            "t.yaml:3:1: record_compression: expected zstd or none, got 'gzip'");
  EXPECT_FALSE(parse_config(kJobs + "record_compression: [zstd]\n", "t.yaml").ok());
}

TEST(JobsConfig, DarshanLogs) {
  EXPECT_FALSE(parsed(kJobs).darshan_logs);
  for (const char* yes : {"true", "True", "TRUE", "\"true\""})
    EXPECT_TRUE(parsed(kJobs + "darshan_logs: " + yes + "\n").darshan_logs) << yes;
  for (const char* no : {"false", "False", "FALSE"})
    EXPECT_FALSE(parsed(kJobs + "darshan_logs: " + no + "\n").darshan_logs) << no;
  // YAML 1.1's words and typos are not booleans here: said, not read as false.
  EXPECT_EQ(error_of(kJobs + "darshan_logs: yes\n"),
            "t.yaml:3:1: darshan_logs: expected true or false, got 'yes'");
  EXPECT_EQ(error_of(kJobs + "darshan_logs: 1\n"),
            "t.yaml:3:1: darshan_logs: expected true or false, got '1'");
  EXPECT_EQ(error_of(kJobs + "darshan_logs: ture\n"),
            "t.yaml:3:1: darshan_logs: expected true or false, got 'ture'");
  EXPECT_EQ(error_of(kJobs + "darshan_logs: [true]\n"),
            "t.yaml:3:1: darshan_logs: expected true or false, got a list");
  EXPECT_EQ(error_of(kJobs + "darshan_logs: {on: true}\n"),
            "t.yaml:3:1: darshan_logs: expected true or false, got a map");
  EXPECT_EQ(error_of(kJobs + "darshan_log: true\n"),
            "t.yaml:3:1: unknown key 'darshan_log' (did you mean 'darshan_logs'?)");
  // Under rotation, where one might look for it: an unknown key there.
  EXPECT_EQ(error_of(kJobs + "rotation:\n  darshan_logs: true\n"),
            "t.yaml:4:3: rotation: unknown key 'darshan_logs'");
}

TEST(JobsConfigErrors, StringsPathsAndLevels) {
  EXPECT_EQ(error_of(kJobs + "output_dir: var/lib/iolens\n"),
            "t.yaml:3:1: output_dir: expected an absolute path, got 'var/lib/iolens'");
  EXPECT_EQ(error_of(kJobs + "state_dir: \"\"\n"),
            "t.yaml:3:1: state_dir: expected an absolute path, got ''");
  EXPECT_EQ(error_of(kJobs + "pin_dir: [/a]\n"),
            "t.yaml:3:1: pin_dir: expected an absolute path, got a list");
  EXPECT_EQ(error_of(kJobs + "cgroup_root: sys/fs/cgroup\n"),
            "t.yaml:3:1: cgroup_root: expected 'auto' or an absolute path, got 'sys/fs/cgroup'");
  EXPECT_EQ(error_of(kJobs + "socket: run/iolens.sock\n"),
            "t.yaml:3:1: socket: expected an absolute path, got 'run/iolens.sock'");
  const std::string long_socket = "/run/" + std::string(103, 's');
  EXPECT_EQ(error_of(kJobs + "socket: " + long_socket + "\n"),
            "t.yaml:3:1: socket: '/run/" + std::string(59, 's') +
                "...' is 108 bytes; a unix socket path holds at most 107");
  EXPECT_TRUE(parse_config(kJobs + "socket: " + long_socket.substr(1) + "\n", "t").errors.size() ==
              1);
  EXPECT_EQ(parsed(kJobs + "socket: /" + std::string(106, 's') + "\n").socket_path.size(), 107u);
  EXPECT_EQ(error_of(kJobs + "socket_group: {a: b}\n"),
            "t.yaml:3:1: socket_group: expected a string, got a map");
  EXPECT_EQ(
      error_of(kJobs + "log_level: verbose\n"),
      "t.yaml:3:1: log_level: expected one of trace, debug, info, warn, error, got 'verbose'");
  EXPECT_EQ(error_of(kJobs + "log_level: warning\n"),
            "t.yaml:3:1: log_level: expected one of trace, debug, info, warn, error, got 'warning' "
            "(did you mean 'warn'?)");
  EXPECT_EQ(error_of(kJobs + "log_level: INFO\n"),
            "t.yaml:3:1: log_level: expected one of trace, debug, info, warn, error, got 'INFO' "
            "(did you mean 'info'?)");
  // Control bytes are escaped in messages.
  EXPECT_EQ(error_of(kJobs + "log_level: \"a\\tb\\x01\"\n"),
            "t.yaml:3:1: log_level: expected one of trace, debug, info, warn, error, got "
            "'a\\x09b\\x01'");
}

// --- errors: rules -----------------------------------------------------------------------------

TEST(JobsConfigErrors, RuleShape) {
  EXPECT_EQ(
      error_of("jobs:\n  - kubernetes\n"),
      "t.yaml:2:5: jobs[0]: expected a rule (a map such as 'kubernetes: {}'), got 'kubernetes'");
  EXPECT_EQ(error_of("jobs:\n  -\n  - slurm: {}\n"),
            "t.yaml:1:1: jobs[0]: expected a rule (a map such as 'kubernetes: {}'), got nothing");
  EXPECT_EQ(error_of("jobs:\n  - name: x\n"),
            "t.yaml:2:5: jobs[0]: a rule needs one of kubernetes, slurm, systemd, cgroup, process");
  // An unknown key says it all: no second error about the missing kind.
  EXPECT_EQ(error_of("jobs:\n  - kubernets: {}\n"),
            "t.yaml:2:5: jobs[0]: unknown key 'kubernets' (did you mean 'kubernetes'?)");
  EXPECT_EQ(error_of("jobs:\n  - kubernetes: {}\n    slurm: {}\n"),
            "t.yaml:3:5: jobs[0].slurm: a rule has one kind, and this one is already 'kubernetes'");
  EXPECT_EQ(
      error_of("jobs:\n  - kubernetes: /kubepods.slice\n"),
      "t.yaml:2:5: jobs[0].kubernetes: expected a map (may be empty: {}), got '/kubepods.slice'");
  EXPECT_EQ(error_of("jobs:\n  - kubernetes: {root: [/a]}\n"),
            "t.yaml:2:18: jobs[0].kubernetes: unknown key 'root' (did you mean 'roots'?)");
}

TEST(JobsConfigErrors, RuleNames) {
  EXPECT_EQ(error_of("jobs:\n  - kubernetes: {}\n  - kubernetes: {roots: [/k8s]}\n"),
            "t.yaml:3:5: jobs[1].name: 'kubernetes' is also the name of jobs[0]; give each rule "
            "its own name:");
  EXPECT_EQ(
      error_of("jobs:\n  - slurm: {}\n    name: a\n  - kubernetes: {}\n    name: a\n"),
      "t.yaml:5:5: jobs[1].name: 'a' is also the name of jobs[0]; give each rule its own name:");
  EXPECT_EQ(error_of("jobs:\n  - slurm: {}\n    name: my job\n"),
            "t.yaml:3:5: jobs[0].name: expected a name of 1 to 64 letters, digits, '.', '_' or "
            "'-', got 'my job'");
  EXPECT_EQ(error_of("jobs:\n  - slurm: {}\n    name: ''\n"),
            "t.yaml:3:5: jobs[0].name: expected a name of 1 to 64 letters, digits, '.', '_' or "
            "'-', got ''");
  EXPECT_EQ(
      parsed("jobs:\n  - slurm: {}\n    name: " + std::string(64, 'n') + "\n").rules[0].name.size(),
      64u);
  EXPECT_EQ(errors_of("jobs:\n  - slurm: {}\n    name: " + std::string(65, 'n') + "\n").size(), 1u);
}

TEST(JobsConfigErrors, Roots) {
  const std::string head = "jobs:\n  - kubernetes:\n      roots: ";
  EXPECT_EQ(
      error_of(head + "[]\n"),
      "t.yaml:3:7: jobs[0].kubernetes.roots: expected a list of cgroup paths, got an empty list");
  EXPECT_EQ(error_of(head + "/kubepods.slice\n"),
            "t.yaml:3:7: jobs[0].kubernetes.roots: expected a list of cgroup paths, got "
            "'/kubepods.slice'");
  EXPECT_EQ(error_of(head + "[/kubepods.slice, kubepods]\n"),
            "t.yaml:3:32: jobs[0].kubernetes.roots[1]: expected an absolute cgroup path (starting "
            "with '/'), got 'kubepods'");
  EXPECT_EQ(error_of(head + "[/]\n"),
            "t.yaml:3:15: jobs[0].kubernetes.roots[0]: '/' would make the kernel trace the whole "
            "machine");
  EXPECT_EQ(error_of(head + "[/a/../b]\n"),
            "t.yaml:3:15: jobs[0].kubernetes.roots[0]: '/a/../b' has an empty, '.' or '..' "
            "component (or a trailing '/')");
  EXPECT_EQ(error_of(head + "[/kubepods.slice/]\n"),
            "t.yaml:3:15: jobs[0].kubernetes.roots[0]: '/kubepods.slice/' has an empty, '.' or "
            "'..' component (or a trailing '/')");
  EXPECT_EQ(error_of(head + "[/kube*]\n"),
            "t.yaml:3:15: jobs[0].kubernetes.roots[0]: '/kube*' is not a literal path; for globs "
            "use a cgroup rule with paths:");
  EXPECT_EQ(error_of(head + "[[/a]]\n"),
            "t.yaml:3:15: jobs[0].kubernetes.roots[0]: expected a string, got a list");
  EXPECT_EQ(error_of("jobs:\n  - slurm:\n      roots:\n        - /slurm\n        - slurm\n"),
            "t.yaml:5:11: jobs[0].slurm.roots[1]: expected an absolute cgroup path (starting with "
            "'/'), got 'slurm'");
}

TEST(JobsConfigErrors, Systemd) {
  EXPECT_EQ(error_of("jobs:\n  - systemd: {}\n"),
            "t.yaml:2:5: jobs[0].systemd.units: required: a list of unit name globs such as "
            "train-*.service");
  EXPECT_EQ(
      error_of("jobs:\n  - systemd:\n      units: []\n"),
      "t.yaml:3:7: jobs[0].systemd.units: expected a list of unit name globs, got an empty list");
  EXPECT_EQ(error_of("jobs:\n  - systemd:\n      units: [system.slice/train.service]\n"),
            "t.yaml:3:15: jobs[0].systemd.units[0]: expected a unit name or glob, not a path, got "
            "'system.slice/train.service'");
  EXPECT_EQ(error_of("jobs:\n  - systemd:\n      units: ['train-[0-9.service']\n"),
            "t.yaml:3:15: jobs[0].systemd.units[0]: unterminated '[' in 'train-[0-9.service'");
  EXPECT_EQ(error_of("jobs:\n  - systemd:\n      slice: system.slice\n      units: [a.service]\n"),
            "t.yaml:3:7: jobs[0].systemd.slice: expected an absolute cgroup path (starting with "
            "'/'), got 'system.slice'");
  EXPECT_EQ(
      error_of("jobs:\n  - systemd:\n      slice: /system\n      units: [a.service]\n"),
      "t.yaml:3:7: jobs[0].systemd.slice: expected a slice such as /system.slice, got '/system'");
  EXPECT_EQ(error_of("jobs:\n  - systemd:\n      slice: /\n      units: [a.service]\n"),
            "t.yaml:3:7: jobs[0].systemd.slice: '/' would make the kernel trace the whole machine");
  EXPECT_EQ(error_of("jobs:\n  - systemd:\n      slice: /*.slice\n      units: [a.service]\n"),
            "t.yaml:3:7: jobs[0].systemd.slice: '/*.slice' is not a literal path; for globs use a "
            "cgroup rule with paths:");
}

TEST(JobsConfigErrors, Cgroup) {
  EXPECT_EQ(error_of("jobs:\n  - cgroup: {}\n"),
            "t.yaml:2:5: jobs[0].cgroup.paths: required: a list of cgroup path globs such as "
            "/batch.slice/job-*.scope");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: ~\n"),
            "t.yaml:2:5: jobs[0].cgroup.paths: required: a list of cgroup path globs such as "
            "/batch.slice/job-*.scope");
  EXPECT_EQ(
      error_of("jobs:\n  - cgroup:\n      paths: []\n"),
      "t.yaml:3:7: jobs[0].cgroup.paths: expected a list of cgroup path globs, got an empty list");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: ['/*/job']\n"),
            "t.yaml:3:15: jobs[0].cgroup.paths[0]: the first component '*' has a wildcard: the "
            "kernel would trace the whole machine; start with a fixed component such as "
            "/kubepods.slice or /system.slice");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: [batch/*]\n"),
            "t.yaml:3:15: jobs[0].cgroup.paths[0]: expected an absolute cgroup path (starting with "
            "'/'), got 'batch/*'");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: ['/batch/**']\n"),
            "t.yaml:3:15: jobs[0].cgroup.paths[0]: a trailing '**' adds nothing: the job is the "
            "shortest matching prefix, so '/batch' itself would be the job; write '/batch', or "
            "'/batch/*' to make each child a job");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: ['/batch/a**']\n"),
            "t.yaml:3:15: jobs[0].cgroup.paths[0]: '**' must be a whole component, got 'a**' in "
            "'/batch/a**'");
  EXPECT_EQ(error_of("jobs:\n  - cgroup:\n      paths: ['/batch/[a']\n"),
            "t.yaml:3:15: jobs[0].cgroup.paths[0]: unterminated '[' in '/batch/[a'");
}

TEST(JobsConfigErrors, Process) {
  EXPECT_EQ(error_of("jobs:\n  - process: {}\n"),
            "t.yaml:2:5: jobs[0].process.comm: required: the command name the kernel matches at "
            "exec (at most 15 bytes)");
  EXPECT_EQ(error_of("jobs:\n  - process: {cmdline: x}\n"),
            "t.yaml:2:5: jobs[0].process.comm: required: the command name the kernel matches at "
            "exec (at most 15 bytes)");
  EXPECT_EQ(error_of("jobs:\n  - process:\n      comm: python-training-job\n"),
            "t.yaml:3:7: jobs[0].process.comm: 'python-training-job' is 19 bytes; the kernel keeps "
            "only the first 15 of a command name, so write 'python-training'");
  EXPECT_EQ(errors_of("jobs:\n  - process:\n      comm: fifteen-bytes-x\n").size(), 0u);
  EXPECT_EQ(error_of("jobs:\n  - process:\n      comm: /usr/bin/python3\n"),
            "t.yaml:3:7: jobs[0].process.comm: expected a command name, not a path (the kernel "
            "matches the executable's file name, cut to 15 bytes), got '/usr/bin/python3'");
  EXPECT_EQ(error_of("jobs:\n  - process:\n      comm: ''\n"),
            "t.yaml:3:7: jobs[0].process.comm: expected a command name, got ''");
  const std::string bad_regex = check_cmdline_regex("train(");
  ASSERT_TRUE(bad_regex.starts_with("invalid regular expression: ")) << bad_regex;
  EXPECT_EQ(error_of("jobs:\n  - process:\n      comm: python3\n      cmdline: 'train('\n"),
            "t.yaml:4:7: jobs[0].process.cmdline: " + bad_regex);
  EXPECT_EQ(errors_of("jobs:\n  - process:\n      comm: p\n      cmdline: '(a)\\1'\n").size(), 1u);
  EXPECT_EQ(
      error_of("jobs:\n  - process:\n      comm: p\n      cmdline: '" + std::string(1025, 'a') +
               "'\n"),
      "t.yaml:4:7: jobs[0].process.cmdline: a regular expression of at most 1024 bytes, got 1025");
}

TEST(JobsConfigErrors, AllErrorsAtOnceInFileOrder) {
  const Strings errors = errors_of(R"(output_dir: relative
log_level: loud
limits:
  max_records: 0
  kernel_file_records: 99999999999
  max_file_per_job: 3
rotation:
  max_size: huge
jobs:
  - kubernetes: {}
  - cgroup:
      paths: ["/*", /ok/*, "/x/**"]
  - process: {comm: a-very-long-command-name}
  - kubernetes: {}
bogus: 1
)");
  EXPECT_EQ(
      errors,
      (Strings{
          "t.yaml:1:1: output_dir: expected an absolute path, got 'relative'",
          "t.yaml:2:1: log_level: expected one of trace, debug, info, warn, error, got 'loud'",
          "t.yaml:4:3: limits.max_records: expected a positive integer, got '0'",
          "t.yaml:5:3: limits.kernel_file_records: expected a positive integer at most "
          "4294967295, got '99999999999'",
          "t.yaml:6:3: limits: unknown key 'max_file_per_job' (did you mean "
          "'max_files_per_job'?)",
          "t.yaml:8:3: rotation.max_size: expected a size in bytes, or a number and a unit "
          "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got 'huge'",
          "t.yaml:12:15: jobs[1].cgroup.paths[0]: the first component '*' has a wildcard: "
          "the kernel would trace the whole machine; start with a fixed component such as "
          "/kubepods.slice or /system.slice",
          "t.yaml:12:28: jobs[1].cgroup.paths[2]: a trailing '**' adds nothing: the job is "
          "the shortest matching prefix, so '/x' itself would be the job; write '/x', or "
          "'/x/*' to make each child a job",
          "t.yaml:13:15: jobs[2].process.comm: 'a-very-long-command-name' is 24 bytes; the "
          "kernel keeps only the first 15 of a command name, so write 'a-very-long-com'",
          "t.yaml:14:5: jobs[3].name: 'kubernetes' is also the name of jobs[0]; give each "
          "rule its own name:",
          "t.yaml:15:1: unknown key 'bogus'",
      }));
}

// --- files -------------------------------------------------------------------------------------

TEST(JobsConfigFile, UnreadableIsOneClearError) {
  const ConfigResult missing = load_config_file("/nonexistent/iolensd.yaml");
  EXPECT_EQ(missing.errors,
            Strings{"/nonexistent/iolensd.yaml: cannot read: No such file or directory"});
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(load_config_file(dir).errors, Strings{dir + ": cannot read: Is a directory"});
}

TEST(JobsConfigFile, SourceNameIsThePath) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("iolens-config-test-" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "jobs:\n  - kubernetes: {}\nlog_level: loud\n";
  }
  const ConfigResult r = load_config_file(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(r.errors, Strings{path.string() + ":3:1: log_level: expected one of trace, debug, "
                                              "info, warn, error, got 'loud'"});
}

TEST(JobsConfig, KindNames) {
  EXPECT_EQ(rule_kind_name(RuleKind::Kubernetes), "kubernetes");
  EXPECT_EQ(rule_kind_name(RuleKind::Slurm), "slurm");
  EXPECT_EQ(rule_kind_name(RuleKind::Systemd), "systemd");
  EXPECT_EQ(rule_kind_name(RuleKind::Cgroup), "cgroup");
  EXPECT_EQ(rule_kind_name(RuleKind::Process), "process");
  EXPECT_EQ(default_roots(RuleKind::Slurm), (Strings{"/system.slice/slurmstepd.scope", "/slurm"}));
  EXPECT_TRUE(default_roots(RuleKind::Cgroup).empty());
}

// Garbage in: errors out, never an exception or a crash.
TEST(JobsConfig, HostileInputNeverThrows) {
  std::mt19937 rng(99);
  const std::string alphabet = "{}[]:,-?!&*|>'\"#%@` \n\t\\~abc019./";
  const std::string valid =
      "jobs:\n  - kubernetes: {roots: [/a]}\n  - process: {comm: x, cmdline: '.*'}\n";
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    if (round % 2 == 0) {
      text = valid;
      for (int i = 0; i < 3; ++i) text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
    } else {
      text.resize(rng() % 64);
      for (char& c : text)
        c = (rng() % 4 == 0) ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    }
    ConfigResult r;
    ASSERT_NO_THROW(r = parse_config(text, "f")) << text;
    if (r.ok()) {
      EXPECT_NO_THROW(Selector{r.config.rules}) << text;
    }
  }
  // Deep nesting is refused by yaml-cpp's depth guard, as an error.
  EXPECT_FALSE(parse_config(std::string(100000, '['), "f").ok());
  EXPECT_FALSE(parse_config("jobs: " + std::string(5000, '{'), "f").ok());
  // Aliases are followed, not expanded into copies.
  EXPECT_TRUE(parse_config("jobs:\n  - &k {kubernetes: {roots: [/a]}, name: a}\n  - *k\n", "f")
                  .errors.size() == 1);
}

TEST(JobsConfig, MetricsDefaultsAndEveryKey) {
  const Config d = parsed(kJobs);
  EXPECT_EQ(d.metrics.listen, "127.0.0.1:9464");
  EXPECT_EQ(d.metrics.top_files, 0u);
  EXPECT_EQ(d.metrics.max_jobs, 1000u);
  EXPECT_EQ(d.metrics.threads, 8u);
  EXPECT_EQ(d.metrics.request_timeout_ms, 5000u);
  ASSERT_EQ(d.metrics.classes.size(), 2u);
  EXPECT_EQ(d.metrics.classes[0].name, "python");
  const Config c = parsed(kJobs + R"(metrics:
  listen: "[::1]:0"
  threads: 16
  request_timeout: 1500ms
  node: gpu-17
  top_files: 20
  max_jobs: 50
  classes:
    - {name: dataset, prefixes: [/data/, /scratch/ds/]}
    - name: checkpoint
      prefixes: [/ckpt/]
  basic_auth: {username: prom, password_file: /etc/iolens/pw}
  tls: {cert_file: /etc/iolens/metrics.pem}
)");
  EXPECT_EQ(c.metrics.listen, "[::1]:0");
  EXPECT_EQ(c.metrics.threads, 16u);
  EXPECT_EQ(c.metrics.request_timeout_ms, 1500u);
  EXPECT_EQ(c.metrics.node, "gpu-17");
  EXPECT_EQ(c.metrics.top_files, 20u);
  EXPECT_EQ(c.metrics.max_jobs, 50u);
  ASSERT_EQ(c.metrics.classes.size(), 2u);
  EXPECT_EQ(c.metrics.classes[0].prefixes, (Strings{"/data/", "/scratch/ds/"}));
  EXPECT_EQ(c.metrics.classes[1].name, "checkpoint");
  EXPECT_EQ(c.metrics.username, "prom");
  EXPECT_EQ(c.metrics.password_file, "/etc/iolens/pw");
  EXPECT_EQ(c.metrics.tls_cert_file, "/etc/iolens/metrics.pem");
  EXPECT_EQ(parsed(kJobs + "metrics: {listen: \"\", top_files: 0}\n").metrics.listen, "");
}

TEST(JobsConfig, MetricsErrors) {
  EXPECT_EQ(error_of(kJobs + "metrics: {listen: 9464}\n"),
            "t.yaml:3:11: metrics.listen: expected host:port (e.g. 127.0.0.1:9464), got '9464'");
  EXPECT_EQ(error_of(kJobs + "metrics: {listen: \"1.2.3.4:70000\"}\n"),
            "t.yaml:3:11: metrics.listen: expected a port from 0 to 65535, got '1.2.3.4:70000'");
  EXPECT_EQ(error_of(kJobs + "metrics: {listen: \"::1:80\"}\n"),
            "t.yaml:3:11: metrics.listen: an IPv6 address goes in brackets ([::1]:9464), got "
            "'::1:80'");
  EXPECT_EQ(error_of(kJobs + "metrics: {top_files: 5000}\n"),
            "t.yaml:3:11: metrics.top_files: expected a positive integer at most 1000, got '5000'");
  EXPECT_EQ(error_of(kJobs + "metrics: {classes: [{name: other, prefixes: [/x]}]}\n"),
            "t.yaml:3:21: metrics.classes[0]: name: expected 1-32 characters of [a-z0-9_], not "
            "'other', got 'other'");
  EXPECT_EQ(error_of(kJobs + "metrics: {classes: [{name: a, prefixes: [x/]}]}\n"),
            "t.yaml:3:42: metrics.classes[0].prefixes[0]: expected an absolute path prefix, got "
            "'x/'");
  EXPECT_EQ(error_of(kJobs + "metrics: {classes: [{name: a, prefixes: [/x]}, {name: a, "
                             "prefixes: [/y]}]}\n"),
            "t.yaml:3:48: metrics.classes[1]: class 'a' is defined twice");
  EXPECT_EQ(error_of(kJobs + "metrics: {basic_auth: {username: prom}}\n"),
            "t.yaml:3:11: metrics.basic_auth: needs a username (without ':') and a password_file "
            "(an absolute path)");
  EXPECT_EQ(error_of(kJobs + "metrics: {tls: {}}\n"), "t.yaml:3:11: metrics.tls: needs cert_file");
  EXPECT_EQ(error_of(kJobs + "metrics: {threads: 0}\n"),
            "t.yaml:3:11: metrics.threads: expected a positive integer, got '0'");
  EXPECT_EQ(error_of(kJobs + "metrics: {threads: 1000}\n"),
            "t.yaml:3:11: metrics.threads: expected a positive integer at most 256, got '1000'");
  EXPECT_EQ(error_of(kJobs + "metrics: {request_timeout: 0}\n"),
            "t.yaml:3:11: metrics.request_timeout: expected a positive duration, got '0'");
  EXPECT_EQ(error_of(kJobs + "metrics: {request_timeout: 2m}\n"),
            "t.yaml:3:11: metrics.request_timeout: at most 60s: a slow client holds a server "
            "thread that long, got '2m'");
  EXPECT_EQ(error_of(kJobs + "metrics: {lisen: x}\n"),
            "t.yaml:3:11: metrics: unknown key 'lisen' (did you mean 'listen'?)");
}

TEST(JobsConfig, Runs) {
  // Off by default: no rule added.
  EXPECT_EQ(parsed(kJobs).runs, "");
  EXPECT_EQ(parsed(kJobs).rules.size(), 1u);
  // A run root adds one cgroup rule, rooted there, whose jobs are its run-* children; with it
  // no other rule is needed.
  const Config c = parsed("runs: /iolens.runs\n");
  EXPECT_EQ(c.runs, "/iolens.runs");
  ASSERT_EQ(c.rules.size(), 1u);
  EXPECT_EQ(c.rules[0].name, kRunRuleName);
  EXPECT_EQ(c.rules[0].kind, RuleKind::Cgroup);
  EXPECT_EQ(c.rules[0].roots, Strings{"/iolens.runs"});
  EXPECT_EQ(c.rules[0].globs, Strings{"/iolens.runs/run-*"});
  const Selector sel(c.rules);
  const Classification job = sel.classify("/iolens.runs/run-12-3");
  ASSERT_EQ(job.verdict, Verdict::Job);
  EXPECT_EQ(job.identity->id, "cgroup/iolens.runs/run-12-3");
  EXPECT_EQ(sel.classify("/iolens.runs").verdict, Verdict::Container);
  EXPECT_EQ(sel.classify("/iolens.runs/other").verdict, Verdict::Excluded);
  EXPECT_EQ(parsed("runs: \"\"\n" + kJobs).runs, "");
  // Errors: not a literal cgroup path; the runs' own rule name taken; nothing to trace.
  EXPECT_EQ(error_of("runs: iolens.runs\n" + kJobs),
            "t.yaml:1:1: runs: expected an absolute cgroup path (starting with '/'), got "
            "'iolens.runs'");
  EXPECT_EQ(error_of("runs: /\n" + kJobs),
            "t.yaml:1:1: runs: '/' would make the kernel trace the whole machine");
  EXPECT_NE(error_of("runs: /r\njobs:\n  - name: iolens-run\n    kubernetes: {}\n")
                .find("the rule name 'iolens-run' is the runs' own"),
            std::string::npos);
  EXPECT_NE(error_of("runs: \"\"\n").find("no rule"), std::string::npos);
}
