# SPDX-License-Identifier: Apache-2.0
# Compiles bpf/*.bpf.c into one object and one bpftool skeleton, exposed as an INTERFACE target
# that only the loader links. Each custom command's output is depended on by exactly one target
# (bpftrace's BuildBPF.cmake explains the race when two targets depend on one output).

find_program(CLANG_EXE NAMES clang-14 clang REQUIRED)
find_program(BPFTOOL_EXE NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

set(IOLENS_VMLINUX_H "" CACHE FILEPATH
    "A vendored vmlinux.h to build against; empty = generate from IOLENS_BTF_SOURCE at build time")
set(IOLENS_BTF_SOURCE "/sys/kernel/btf/vmlinux" CACHE FILEPATH
    "Kernel BTF that vmlinux.h is generated from (CO-RE makes the object portable anyway)")

# clang's own system include dirs, so BPF code can include <linux/types.h> and friends the way
# libbpf-tools does (-idirafter keeps our headers first).
execute_process(COMMAND ${CLANG_EXE} -v -E - INPUT_FILE /dev/null
                OUTPUT_VARIABLE _out ERROR_VARIABLE _clang_v)
string(REGEX MATCH "#include <...> search starts here:\n(.*)End of search list" _m "${_clang_v}")
string(REGEX REPLACE "\n +" ";" _dirs "${CMAKE_MATCH_1}")
set(BPF_SYS_INCLUDES "")
foreach(_d ${_dirs})
  string(STRIP "${_d}" _d)
  if(_d)
    list(APPEND BPF_SYS_INCLUDES -idirafter ${_d})
  endif()
endforeach()

function(iolens_bpf_object target)
  cmake_parse_arguments(ARG "" "SKEL_NAME" "SOURCES;HEADERS;DEFINES" ${ARGN})
  set(defines "")
  foreach(d ${ARG_DEFINES})
    list(APPEND defines -D${d})
  endforeach()
  set(outdir ${CMAKE_CURRENT_BINARY_DIR}/${target})
  file(MAKE_DIRECTORY ${outdir})

  if(IOLENS_VMLINUX_H)
    set(vmlinux ${IOLENS_VMLINUX_H})
    get_filename_component(vmlinux_dir ${vmlinux} DIRECTORY)
  else()
    set(vmlinux ${outdir}/vmlinux.h)
    set(vmlinux_dir ${outdir})
    add_custom_command(OUTPUT ${vmlinux}
      COMMAND ${BPFTOOL_EXE} btf dump file ${IOLENS_BTF_SOURCE} format c > ${vmlinux}.tmp
      COMMAND ${CMAKE_COMMAND} -E rename ${vmlinux}.tmp ${vmlinux}
      COMMENT "Generating vmlinux.h from ${IOLENS_BTF_SOURCE}"
      VERBATIM)
  endif()

  set(objs "")
  foreach(src ${ARG_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    set(obj ${outdir}/${name}.bpf.o)
    add_custom_command(OUTPUT ${obj}
      COMMAND ${CLANG_EXE} -g -O2 -Wall -Wtautological-unsigned-zero-compare -Werror -target bpf -D__TARGET_ARCH_x86
              ${defines} -I${vmlinux_dir} -I${CMAKE_CURRENT_SOURCE_DIR} ${BPF_SYS_INCLUDES}
              -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${src} ${vmlinux} ${ARG_HEADERS}
      COMMENT "BPF ${src}"
      VERBATIM)
    list(APPEND objs ${obj})
  endforeach()

  set(linked ${outdir}/${ARG_SKEL_NAME}.o)
  set(skel ${outdir}/${ARG_SKEL_NAME}.skel.h)
  add_custom_command(OUTPUT ${linked} ${skel}
    COMMAND ${BPFTOOL_EXE} gen object ${linked} ${objs}
    COMMAND ${BPFTOOL_EXE} gen skeleton ${linked} name ${ARG_SKEL_NAME} > ${skel}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${objs}
    COMMENT "Skeleton ${ARG_SKEL_NAME}"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS ${skel})
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_gen)
  target_include_directories(${target} INTERFACE ${outdir} ${CMAKE_CURRENT_SOURCE_DIR})
  set(${target}_OBJECT ${linked} PARENT_SCOPE)
  set(${target}_SKEL ${skel} PARENT_SCOPE)
endfunction()

# Two builds of one source share one skeleton (the loader opens either object's bytes with
# the first one's skeleton): their maps, programs and global variables must match one to one.
# bpftool's skeletons say exactly that (every map, program, variable, its offset, size and
# padding); they are compared with the object bytes and the skeleton names left out, and the
# build fails if they differ.
function(iolens_bpf_same_layout target target_a skel_a name_a target_b skel_b name_b)
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/${target}.stamp)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DA=${skel_a} -DNAME_A=${name_a} -DB=${skel_b} -DNAME_B=${name_b}
            -P ${PROJECT_SOURCE_DIR}/cmake/SameSkeletonLayout.cmake
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${skel_a} ${skel_b} ${PROJECT_SOURCE_DIR}/cmake/SameSkeletonLayout.cmake
    COMMENT "Same layout: ${name_a} and ${name_b}"
    VERBATIM)
  add_custom_target(${target} DEPENDS ${stamp})
  # The skeletons are the outputs of the objects' own targets: built there, never here too.
  add_dependencies(${target} ${target_a}_gen ${target_b}_gen)
endfunction()
