// SPDX-License-Identifier: Apache-2.0
/*
 * bench/map_insert.py's runner: loads map_insert.bpf.o (preallocated or not, inserting or not),
 * times `calls` getppid() of this process (each makes one new entry), prints ns per call.
 * Usage: map_insert OBJ PREALLOC(0|1) INSERT(0|1) CALLS
 *        map_insert --create ENTRIES VALUE_SIZE PREALLOC(0|1): ms to make such a hash map
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_map *map;
	long calls;
	double t0, t1;

	if (argc == 5 && !strcmp(argv[1], "--create")) {
		/* the start-up side: making a hash of ENTRIES x VALUE_SIZE bytes, preallocated or not */
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = atoi(argv[4]) ? 0 : BPF_F_NO_PREALLOC);
		int fd;

		t0 = now_ns();
		fd = bpf_map_create(BPF_MAP_TYPE_HASH, "m", 32, atoi(argv[3]), atoi(argv[2]), &o);
		t1 = now_ns();
		if (fd < 0) {
			fprintf(stderr, "map_insert: cannot create the map\n");
			return 1;
		}
		printf("%.3f\n", (t1 - t0) / 1e6);
		return 0;
	}
	if (argc != 5) {
		fprintf(stderr, "usage: map_insert OBJ PREALLOC INSERT CALLS | "
				"map_insert --create ENTRIES VALUE_SIZE PREALLOC\n");
		return 2;
	}
	calls = atol(argv[4]);
	if (calls < 1 || calls > 1000000) {
		fprintf(stderr, "map_insert: CALLS must be 1 to 1000000\n");
		return 2;
	}
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj) {
		fprintf(stderr, "map_insert: cannot open %s\n", argv[1]);
		return 1;
	}
	map = bpf_object__find_map_by_name(obj, "m");
	if (!map) {
		fprintf(stderr, "map_insert: %s has no map m\n", argv[1]);
		return 1;
	}
	/* room for every insert and no more: a preallocated map is built whole */
	bpf_map__set_max_entries(map, (__u32)calls);
	if (!atoi(argv[2]))
		bpf_map__set_map_flags(map, BPF_F_NO_PREALLOC);
	if (bpf_object__load(obj)) {
		fprintf(stderr, "map_insert: load failed\n");
		return 1;
	}
	{
		int cfg = bpf_object__find_map_fd_by_name(obj, "cfg");
		__u32 k0 = 0, k1 = 1, tgid = (__u32)getpid(), insert = (__u32)atoi(argv[3]);

		if (cfg < 0 || bpf_map_update_elem(cfg, &k0, &tgid, BPF_ANY) ||
		    bpf_map_update_elem(cfg, &k1, &insert, BPF_ANY)) {
			fprintf(stderr, "map_insert: cannot set cfg\n");
			return 1;
		}
	}
	prog = bpf_object__find_program_by_name(obj, "insert_one");
	if (!bpf_program__attach(prog)) {
		fprintf(stderr, "map_insert: attach failed\n");
		return 1;
	}
	t0 = now_ns();
	for (long i = 0; i < calls; i++)
		syscall(SYS_getppid);
	t1 = now_ns();
	printf("%.1f\n", (t1 - t0) / calls);
	return 0;
}
