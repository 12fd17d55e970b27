# Installs this build into a scratch prefix, then configures, builds and runs
# apps/examples/consumer against it with find_package(vitpe), and again with pkg-config alone.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${VITPE_BINARY_DIR} --prefix ${WORK_DIR}/prefix
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${VITPE_SOURCE_DIR}/apps/examples/consumer
  -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
# The bundled model and a committed image, as the README's example uses them.
execute_process(COMMAND ${WORK_DIR}/build/consumer ${VITPE_SOURCE_DIR}/models/vit-fmnist.safetensors
  ${VITPE_SOURCE_DIR}/tests/data/images/rgb_67x45.png RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "${out}")
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()

# The same program built with pkg-config alone (no CMake package): `pkg-config --cflags --libs
# vitpe` from the installed, relocatable vitpe.pc.
file(GLOB_RECURSE pc_files ${WORK_DIR}/prefix/*/vitpe.pc)
if(NOT pc_files)
  message(FATAL_ERROR "the install has no vitpe.pc")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --cflags --libs vitpe OUTPUT_VARIABLE pc_flags
  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs vitpe failed: ${rc}")
endif()
execute_process(COMMAND pkg-config --modversion vitpe OUTPUT_VARIABLE pc_version
  OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
execute_process(COMMAND ${CXX} -std=c++20 ${VITPE_SOURCE_DIR}/apps/examples/consumer/main.cpp
  -DVITPE_PACKAGE_VERSION="${pc_version}" ${pc_flags} -o ${WORK_DIR}/consumer_pkg_config
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer with pkg-config's flags failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer_pkg_config
  ${VITPE_SOURCE_DIR}/models/vit-fmnist.safetensors RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "pkg-config build: ${out}")
if(rc)
  message(FATAL_ERROR "the consumer built with pkg-config failed: ${rc}")
endif()
