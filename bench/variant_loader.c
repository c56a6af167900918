// SPDX-License-Identifier: Apache-2.0
/*
 * variant_loader OBJ PROG...: load and attach the named programs of a BPF object (the others are
 * not loaded), print "ready", and keep them attached until standard input closes.
 * Used by bench/run_bench.py --variants. Build: gcc -O2 -o variant_loader variant_loader.c -lbpf
 */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_link *links[16];
	int nlinks = 0;
	char c;

	if (argc < 3) {
		fprintf(stderr, "usage: variant_loader OBJ PROG...\n");
		return 2;
	}
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj) {
		fprintf(stderr, "variant_loader: cannot open %s\n", argv[1]);
		return 1;
	}
	bpf_object__for_each_program(prog, obj) {
		int wanted = 0;

		for (int i = 2; i < argc; i++)
			wanted |= !strcmp(bpf_program__name(prog), argv[i]);
		bpf_program__set_autoload(prog, wanted);
	}
	if (bpf_object__load(obj)) {
		fprintf(stderr, "variant_loader: load failed\n");
		return 1;
	}
	for (int i = 2; i < argc && nlinks < 16; i++) {
		prog = bpf_object__find_program_by_name(obj, argv[i]);
		if (!prog) {
			fprintf(stderr, "variant_loader: no program %s\n", argv[i]);
			return 1;
		}
		links[nlinks] = bpf_program__attach(prog);
		if (!links[nlinks]) {
			fprintf(stderr, "variant_loader: attach %s failed\n", argv[i]);
			return 1;
		}
		nlinks++;
	}
	printf("ready\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	for (int i = 0; i < nlinks; i++)
		bpf_link__destroy(links[i]);
	bpf_object__close(obj);
	return 0;
}
