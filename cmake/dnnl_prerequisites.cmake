# cmake/dnnl_prerequisites.cmake -- what oneDNN's CMake package will require, checked before it
# is asked for. dnnl-config.cmake records the runtimes oneDNN was built with and then calls
# find_package(OpenCL REQUIRED) (GPU runtime OCL) or find_package(TBB REQUIRED) (TBB threading),
# which ends the configure even under our find_package(dnnl QUIET). Debian's libdnnl-dev is
# built with OCL and only recommends ocl-icd-opencl-dev, so an install without recommends
# lacks it.

# Sets out_var to the missing prerequisites' names ("" when none is missing, or when there is
# no oneDNN package to look at: find_package(dnnl) then reports it absent by itself).
function(kiln_dnnl_prerequisites out_var)
  set(missing "")
  find_file(KILN_DNNL_CONFIG_FILE dnnl-config.cmake
    PATH_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/dnnl lib/cmake/dnnl lib64/cmake/dnnl)
  if(KILN_DNNL_CONFIG_FILE)
    file(STRINGS "${KILN_DNNL_CONFIG_FILE}" gpu_runtime REGEX "set\\(DNNL_GPU_RUNTIME \"OCL\"\\)")
    if(gpu_runtime)
      find_package(OpenCL QUIET)
      if(NOT OpenCL_FOUND)
        list(APPEND missing "OpenCL (ocl-icd-opencl-dev)")
      endif()
    endif()
    file(STRINGS "${KILN_DNNL_CONFIG_FILE}" tbb_runtime
      REGEX "set\\(DNNL_CPU_THREADING_RUNTIME \"TBB\"\\)")
    if(tbb_runtime)
      find_package(TBB QUIET COMPONENTS tbb)
      if(NOT TBB_FOUND)
        list(APPEND missing "TBB (libtbb-dev)")
      endif()
    endif()
  endif()
  string(REPLACE ";" " and " missing "${missing}")
  set(${out_var} "${missing}" PARENT_SCOPE)
endfunction()
