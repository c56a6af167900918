/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Syscall numbers the programs dispatch on, per architecture. The raw sys_enter/sys_exit
 * tracepoints give the number (pt_regs->orig_ax on x86-64), not a name, and vmlinux.h has no
 * __NR_* macros. Values from arch/x86/entry/syscalls/syscall_64.tbl.
 */
#ifndef IOLENS_SYSCALLS_H
#define IOLENS_SYSCALLS_H

#if defined(__TARGET_ARCH_x86) || defined(__x86_64__)
#define IOLENS_NR_read 0
#define IOLENS_NR_write 1
#define IOLENS_NR_open 2
#define IOLENS_NR_close 3
#define IOLENS_NR_stat 4
#define IOLENS_NR_fstat 5
#define IOLENS_NR_lstat 6
#define IOLENS_NR_lseek 8
#define IOLENS_NR_mmap 9
#define IOLENS_NR_pread64 17
#define IOLENS_NR_pwrite64 18
#define IOLENS_NR_readv 19
#define IOLENS_NR_writev 20
#define IOLENS_NR_dup 32
#define IOLENS_NR_sendfile 40
#define IOLENS_NR_dup2 33
#define IOLENS_NR_fcntl 72
#define IOLENS_NR_fsync 74
#define IOLENS_NR_fdatasync 75
#define IOLENS_NR_ftruncate 77
#define IOLENS_NR_rename 82
#define IOLENS_NR_creat 85
#define IOLENS_NR_unlink 87
#define IOLENS_NR_openat 257
#define IOLENS_NR_splice 275
#define IOLENS_NR_newfstatat 262
#define IOLENS_NR_unlinkat 263
#define IOLENS_NR_renameat 264
#define IOLENS_NR_dup3 292
#define IOLENS_NR_preadv 295
#define IOLENS_NR_pwritev 296
#define IOLENS_NR_renameat2 316
#define IOLENS_NR_preadv2 327
#define IOLENS_NR_pwritev2 328
#define IOLENS_NR_copy_file_range 326
#define IOLENS_NR_statx 332
#define IOLENS_NR_openat2 437

/* Whether a syscall is one the programs account (the others cost one test and leave). */
static __always_inline int iolens_syscall_wanted(long nr)
{
	switch (nr) {
	case IOLENS_NR_read: case IOLENS_NR_write: case IOLENS_NR_open: case IOLENS_NR_close:
	case IOLENS_NR_stat: case IOLENS_NR_fstat: case IOLENS_NR_lstat: case IOLENS_NR_lseek:
	case IOLENS_NR_mmap: case IOLENS_NR_pread64: case IOLENS_NR_pwrite64: case IOLENS_NR_readv:
	case IOLENS_NR_writev: case IOLENS_NR_dup: case IOLENS_NR_dup2: case IOLENS_NR_sendfile:
	case IOLENS_NR_fcntl: case IOLENS_NR_fsync: case IOLENS_NR_fdatasync:
	case IOLENS_NR_ftruncate: case IOLENS_NR_rename: case IOLENS_NR_creat: case IOLENS_NR_unlink:
	case IOLENS_NR_openat: case IOLENS_NR_splice: case IOLENS_NR_newfstatat:
	case IOLENS_NR_unlinkat: case IOLENS_NR_renameat: case IOLENS_NR_dup3: case IOLENS_NR_preadv:
	case IOLENS_NR_pwritev: case IOLENS_NR_renameat2: case IOLENS_NR_copy_file_range:
	case IOLENS_NR_preadv2: case IOLENS_NR_pwritev2: case IOLENS_NR_statx:
	case IOLENS_NR_openat2:
		return 1;
	default:
		return 0;
	}
}

/* enum iolens_io_ctx of a wanted syscall: what a page inserted into the page cache during it
 * serves. A copy reads its input first (its output's new pages would count as read misses:
 * copies into the page cache are rare in training jobs). */
static __always_inline __u32 iolens_syscall_io_ctx(long nr)
{
	switch (nr) {
	case IOLENS_NR_read: case IOLENS_NR_pread64: case IOLENS_NR_readv: case IOLENS_NR_preadv:
	case IOLENS_NR_preadv2: case IOLENS_NR_sendfile: case IOLENS_NR_splice:
	case IOLENS_NR_copy_file_range:
		return IOLENS_CTX_READ;
	case IOLENS_NR_write: case IOLENS_NR_pwrite64: case IOLENS_NR_writev:
	case IOLENS_NR_pwritev: case IOLENS_NR_pwritev2: case IOLENS_NR_ftruncate:
		return IOLENS_CTX_WRITE;
	default:
		return IOLENS_CTX_NONE;
	}
}
#else
#error "iolens: syscall numbers are only defined for x86-64 (see bpf/README.md to add an arch)"
#endif

#endif /* IOLENS_SYSCALLS_H */
