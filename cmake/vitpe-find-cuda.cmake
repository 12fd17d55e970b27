# find_package(CUDAToolkit) for vitpe's build and for its installed package's consumers.
#
# CMake 3.25's FindCUDAToolkit (Debian 12's cmake 3.25.1) marks CUDA::nvToolsExt deprecated
# without checking that the target exists, and CUDA 12.9+/13 no longer ship nvToolsExt, so any
# project that requires CMake >= 3.25 stops with "set_property could not find TARGET
# CUDA::nvToolsExt". The module only does that when CMAKE_MINIMUM_REQUIRED_VERSION >= 3.25, so
# the call runs with 3.24 there, and the caller's value is restored afterwards.
macro(vitpe_find_cuda_toolkit)
  if(CMAKE_VERSION VERSION_LESS 3.26 AND DEFINED CMAKE_MINIMUM_REQUIRED_VERSION
     AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
    set(_vitpe_saved_minimum ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit ${ARGN})
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${_vitpe_saved_minimum})
    unset(_vitpe_saved_minimum)
  else()
    find_package(CUDAToolkit ${ARGN})
  endif()
endmacro()
