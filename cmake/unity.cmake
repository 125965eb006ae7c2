# cmake/unity.cmake -- kiln_unity(target batch): compiles a target's C++ files a few at a time,
# each batch one translation unit that includes them, so the headers every file reads (kiln's,
# gtest's, the standard library's) are parsed once per batch instead of once per file: on the
# 2-core machine five test files took 10.7 s as one unit and 25.7 s apart, seven library files
# 5.3 s and 11.6 s.
#
# Why not CMake's UNITY_BUILD: its batch files include the sources by absolute path, so a clone
# in another folder (CI's) writes different batch files and misses every object ccache holds
# (CMakeLists.txt, CCACHE_BASEDIR). These include them relative to the source folder, which is on
# every target's include path.
#
# A batch holds files of one folder with the same per-file properties (definitions, include
# folders, options), which the batch file takes over; a new file changes only its folder's
# batches. Files of one batch share a unit: a name at namespace scope (a static function, an
# anonymous namespace's type) must not be defined twice among them. KILN_UNITY_BUILD=OFF
# compiles every file alone; the TSan build does (scripts/sanitize.sh), so each library file
# still compiles with its own includes.
option(KILN_UNITY_BUILD "Compile each target's files a few at a time in one unit (cmake/unity.cmake)" ON)

function(kiln_unity target batch)
  if(NOT KILN_UNITY_BUILD)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  get_target_property(target_dir ${target} SOURCE_DIR)
  set(properties COMPILE_DEFINITIONS INCLUDE_DIRECTORIES COMPILE_OPTIONS)
  set(kept)
  set(keys)
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\.cpp$" OR src MATCHES "^\\$<")
      list(APPEND kept ${src})
      continue()
    endif()
    get_filename_component(path ${src} ABSOLUTE BASE_DIR ${target_dir})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${path})
    if(rel MATCHES "^\\.\\.")  # outside the source folder (generated): alone
      list(APPEND kept ${src})
      continue()
    endif()
    get_filename_component(rel_dir ${rel} DIRECTORY)
    set(signature "${rel_dir}")
    foreach(p IN LISTS properties)
      get_source_file_property(v_${p} ${path} ${p})
      string(APPEND signature "|${v_${p}}")
    endforeach()
    string(MD5 key "${signature}")
    if(NOT key IN_LIST keys)
      list(APPEND keys ${key})
      string(REPLACE "/" "_" slug_${key} "${rel_dir}")
      foreach(p IN LISTS properties)
        set(${p}_${key} "${v_${p}}")
      endforeach()
      set(files_${key})
    endif()
    list(APPEND files_${key} ${rel})
  endforeach()
  set(batches)
  foreach(key IN LISTS keys)
    list(LENGTH files_${key} count)
    if(count EQUAL 1)  # nothing to share headers with
      list(APPEND kept ${CMAKE_SOURCE_DIR}/${files_${key}})
      continue()
    endif()
    string(SUBSTRING ${key} 0 6 short)
    math(EXPR last "${count} - 1")
    set(n 0)
    foreach(first RANGE 0 ${last} ${batch})
      set(text "// cmake/unity.cmake: a unit of ${target}\n")
      math(EXPR end "${first} + ${batch} - 1")
      if(end GREATER last)
        set(end ${last})
      endif()
      foreach(i RANGE ${first} ${end})
        list(GET files_${key} ${i} rel)
        string(APPEND text "#include \"${rel}\"\n")
      endforeach()
      set(out ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${slug_${key}}_${short}_${n}.cpp)
      file(CONFIGURE OUTPUT ${out} CONTENT "${text}" @ONLY)
      foreach(p IN LISTS properties)
        if(NOT "${${p}_${key}}" STREQUAL "NOTFOUND")
          set_source_files_properties(${out} PROPERTIES ${p} "${${p}_${key}}")
        endif()
      endforeach()
      # GCC warns of a type in an anonymous namespace used by a class defined in an included
      # file, since a header's class would differ between units; a batch's files are no headers.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        set_property(SOURCE ${out} APPEND PROPERTY COMPILE_OPTIONS -Wno-subobject-linkage)
      endif()
      list(APPEND batches ${out})
      math(EXPR n "${n} + 1")
    endforeach()
  endforeach()
  set_property(TARGET ${target} PROPERTY SOURCES ${kept} ${batches})
endfunction()
