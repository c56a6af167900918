# SPDX-License-Identifier: Apache-2.0
# cmake -DA=skel_a.h -DNAME_A=a -DB=skel_b.h -DNAME_B=b -P SameSkeletonLayout.cmake
# Fails unless the two bpftool skeletons describe the same maps, programs and variables: equal
# once the embedded object bytes (the body of NAME__elf_bytes) are dropped and the skeleton
# names made one. See iolens_bpf_same_layout in BpfObject.cmake.

function(normalized file name out)
  file(READ ${file} text)
  # The definition (not the declaration) of the bytes' function, up to its closing brace.
  string(FIND "${text}" "static inline const void *${name}__elf_bytes(size_t *sz)\n{" begin)
  if(begin EQUAL -1)
    message(FATAL_ERROR "${file}: no ${name}__elf_bytes definition (bpftool's skeleton changed?)")
  endif()
  string(SUBSTRING "${text}" ${begin} -1 rest)
  string(FIND "${rest}" "\n}\n" end)
  if(end EQUAL -1)
    message(FATAL_ERROR "${file}: ${name}__elf_bytes has no end")
  endif()
  string(SUBSTRING "${text}" 0 ${begin} head)
  math(EXPR end "${end} + 3")
  string(SUBSTRING "${rest}" ${end} -1 tail)
  string(TOUPPER ${name} upper)
  set(text "${head}${tail}")
  string(REPLACE "${name}" "SKEL" text "${text}")
  string(REPLACE "${upper}" "SKEL" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

normalized(${A} ${NAME_A} a)
normalized(${B} ${NAME_B} b)
if(NOT a STREQUAL b)
  file(WRITE ${B}.layout-a "${a}")
  file(WRITE ${B}.layout-b "${b}")
  message(FATAL_ERROR "the BPF objects ${NAME_A} and ${NAME_B} differ in their maps, programs "
                      "or variables: diff ${B}.layout-a ${B}.layout-b")
endif()
