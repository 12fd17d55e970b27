# Installs this build into a scratch prefix, then configures, builds and runs
# apps/examples/consumer against it with find_package(vitpe).
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
