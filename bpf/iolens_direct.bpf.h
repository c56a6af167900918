/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Included at the end of bpf/iolens.bpf.c (extras: see the comment there). */
/* O_DIRECT (iomap dio) and io_uring requests. */
