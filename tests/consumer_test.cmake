# The package as an application developer meets it (ctest consumer_example):
#  1. `cmake --install` into a scratch prefix: the installed headers are exactly the public ones
#     under include/vitpe, the library is versioned, the data folder holds the bundled checkpoint
#     and the class names;
#  2. apps/examples/consumer built with find_package(vitpe) alone, run with the bundled
#     checkpoint it finds in the prefix's data folder, and on a committed image;
#  3. the same program built with `pkg-config --cflags --libs vitpe` alone;
#  4. the installed command finds its library, its data folder and its video module in the prefix;
#  5. the two Debian packages (cpack -G DEB) unpacked into a scratch root, their dependencies real
#     Debian packages, the consumer built against them and run with their data folder.
# Arguments: VITPE_BINARY_DIR, VITPE_SOURCE_DIR, WORK_DIR, CXX, VITPE_SHARED (OFF: a static
# libvitpe, which has no soname and cannot find its data folder from its own location: an
# application linked statically outside the prefix is pointed at it with VITPE_DATA_DIR).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(REAL_PATH ${WORK_DIR} WORK_DIR)  # as the library reports its own location

# vitpe_run(WHAT COMMAND...): runs COMMAND, stops with its output when it fails; sets `output`.
function(vitpe_run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

# vitpe_expect(TEXT NEEDLE WHAT): TEXT must contain NEEDLE.
function(vitpe_expect text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected '${needle}' in:\n${text}")
  endif()
endfunction()

# vitpe_consumer(PREFIX BUILD): builds the consumer with find_package(vitpe) from PREFIX, runs it
# with the bundled checkpoint (which must come from PREFIX's data folder) and on a committed image.
function(vitpe_consumer prefix build)
  vitpe_run("configuring the consumer against ${prefix}" ${CMAKE_COMMAND}
    -S ${VITPE_SOURCE_DIR}/apps/examples/consumer -B ${build} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
  vitpe_expect("${output}" "vitpe data folder: ${prefix}/share/vitpe"
    "the package's vitpe_DATA_DIR must be the data folder of the prefix it was found in")
  vitpe_run("building the consumer against ${prefix}" ${CMAKE_COMMAND} --build ${build})
  if(NOT VITPE_SHARED)
    set(ENV{VITPE_DATA_DIR} ${prefix}/share/vitpe)
  endif()
  vitpe_run("the consumer (bundled checkpoint)" ${build}/consumer)
  unset(ENV{VITPE_DATA_DIR})
  message(STATUS "${output}")
  vitpe_expect("${output}" "model ${prefix}/share/vitpe/models/vit-fmnist.safetensors"
    "the consumer must find the bundled checkpoint in the data folder it was installed with")
  vitpe_run("the consumer (committed image)" ${build}/consumer
    ${VITPE_SOURCE_DIR}/models/vit-fmnist.safetensors
    ${VITPE_SOURCE_DIR}/tests/data/images/rgb_67x45.png)
  message(STATUS "${output}")
  # Retrieval over committed images, one of them twice: its copy is its nearest neighbour.
  set(gallery ${build}/gallery)
  file(REMOVE_RECURSE ${gallery})
  file(COPY ${VITPE_SOURCE_DIR}/tests/data/images/rgb_67x45.png
    ${VITPE_SOURCE_DIR}/tests/data/images/gray_40x52.png
    ${VITPE_SOURCE_DIR}/tests/data/images/rgba_50x50.png DESTINATION ${gallery})
  file(COPY_FILE ${VITPE_SOURCE_DIR}/tests/data/images/rgb_67x45.png ${gallery}/rgb_copy.png)
  vitpe_run("the retrieval example" ${build}/retrieval
    ${VITPE_SOURCE_DIR}/models/vit-fmnist.safetensors ${gallery} 2)
  message(STATUS "${output}")
  vitpe_expect("${output}" "rgb_67x45.png\n  1. rgb_copy.png (cosine 1.000)"
    "an image's copy must be its nearest neighbour with cosine 1")
endfunction()

# vitpe_check_layout(PREFIX LIBDIR): the installed files an application relies on.
function(vitpe_check_layout prefix libdir)
  file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/*)
  list(SORT headers)
  set(expected vitpe/encodings/encoding.h vitpe/ops/attention_terms.h vitpe/ops/ops.h
    vitpe/ops/random.h vitpe/ops/tensor.h vitpe/vit/io/checkpoint.h vitpe/vit/io/classifier.h
    vitpe/vit/io/data_files.h vitpe/vit/io/preprocess.h vitpe/vit/models/config.h
    vitpe/vit/models/model.h vitpe/vit/models/streams.h vitpe/vit/models/swin/arch.h
    vitpe/vit/models/vit/arch.h
    vitpe/vitpe.h vitpe/vitpe_version.h)
  if(NOT headers STREQUAL expected)
    message(FATAL_ERROR "installed headers under ${prefix}/include: expected the public ones "
      "(${expected}), found ${headers}")
  endif()
  if(VITPE_SHARED)
    set(library ${libdir}/libvitpe.so.0.1)
  else()
    set(library ${libdir}/libvitpe.a)
  endif()
  foreach(f ${library} ${prefix}/share/vitpe/models/vit-fmnist.safetensors
      ${prefix}/share/vitpe/labels/imagenet-1k.txt ${prefix}/share/vitpe/labels/fashion-mnist.txt)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "the install has no ${f}")
    endif()
  endforeach()
  if(VITPE_SHARED)
    vitpe_run("readelf" readelf -d ${library})
    vitpe_expect("${output}" "Library soname: [libvitpe.so.0.1]" "libvitpe's soname")
  endif()
  file(STRINGS ${prefix}/share/vitpe/labels/imagenet-1k.txt names)
  list(LENGTH names n)
  if(NOT n EQUAL 1000)
    message(FATAL_ERROR "labels/imagenet-1k.txt: expected 1000 names, found ${n}")
  endif()
endfunction()

# ---- 1. install ---------------------------------------------------------------------------------
set(prefix ${WORK_DIR}/prefix)
vitpe_run("cmake --install" ${CMAKE_COMMAND} --install ${VITPE_BINARY_DIR} --prefix ${prefix})
# The Python module, when the build made one: installed in the prefix's dist-packages, imported
# from there (its library found through its RPATH), its version the library's.
file(GLOB built_module ${VITPE_BINARY_DIR}/python/vitpe/_vitpe*.so)
if(built_module)
  file(GLOB installed_module ${prefix}/lib/python3*/dist-packages/vitpe/_vitpe*.so)
  if(NOT installed_module)
    message(FATAL_ERROR "the build has the Python module, the install has none under "
      "${prefix}/lib/python3*/dist-packages/vitpe")
  endif()
  get_filename_component(site ${installed_module} DIRECTORY)
  get_filename_component(site ${site} DIRECTORY)
  # (No semicolons in the script: CMake would split the argument there.)
  vitpe_run("importing the installed Python module" ${CMAKE_COMMAND} -E env PYTHONPATH=${site}
    python3 -c "import vitpe\nprint(vitpe.__file__)\nprint(vitpe.__version__, end='')")
  vitpe_expect("${output}" "${site}/vitpe/__init__.py" "the module must import from the prefix")
  string(REGEX REPLACE ".*\n" "" module_version "${output}")
  vitpe_run("the installed vitpe --version" ${prefix}/bin/vitpe --version)
  vitpe_expect("${output}" "${module_version}"
    "the installed module must report the installed library's version")
endif()
file(GLOB_RECURSE pc_files ${prefix}/*/vitpe.pc)
if(NOT pc_files)
  message(FATAL_ERROR "the install has no vitpe.pc")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
get_filename_component(libdir ${pc_dir} DIRECTORY)
vitpe_check_layout(${prefix} ${libdir})

# ---- 2. find_package ----------------------------------------------------------------------------
vitpe_consumer(${prefix} ${WORK_DIR}/build)

# ---- 3. pkg-config alone ------------------------------------------------------------------------
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
vitpe_run("pkg-config --cflags --libs vitpe" pkg-config --cflags --libs vitpe)
string(STRIP "${output}" pc_flags)
if(pc_flags MATCHES "include/vitpe( |$)")
  message(FATAL_ERROR "pkg-config puts vitpe's own folder on the include path: ${pc_flags}")
endif()
vitpe_run("pkg-config --modversion vitpe" pkg-config --modversion vitpe)
string(STRIP "${output}" pc_version)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
vitpe_run("building the consumer with pkg-config's flags" ${CXX} -std=c++20
  ${VITPE_SOURCE_DIR}/apps/examples/consumer/main.cpp -DVITPE_PACKAGE_VERSION="${pc_version}"
  ${pc_flags} -Wl,-rpath,${libdir} -o ${WORK_DIR}/consumer_pkg_config)
vitpe_run("the consumer built with pkg-config" ${WORK_DIR}/consumer_pkg_config
  ${VITPE_SOURCE_DIR}/models/vit-fmnist.safetensors)
message(STATUS "pkg-config build: ${output}")

# ---- 4. the installed command -------------------------------------------------------------------
vitpe_run("the installed vitpe --version" ${prefix}/bin/vitpe --version)
vitpe_expect("${output}" "data folder: ${prefix}/share/vitpe" "the installed command's data folder")
# vitpe_video_module(COMMAND): COMMAND's `classify --video` loads the video module of its install
# (lib/vitpe/libvitpe_video.so): a missing file is then a source that cannot be opened, not a
# module that cannot be loaded.
function(vitpe_video_module command)
  execute_process(COMMAND ${command} classify --model vit-fmnist --video ${WORK_DIR}/missing.avi
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  vitpe_expect("${err}" "missing.avi: cannot be opened"
    "${command} classify --video must load the video module of its install")
endfunction()
vitpe_video_module(${prefix}/bin/vitpe)

# ---- 5. the Debian packages ---------------------------------------------------------------------
vitpe_run("cpack -G DEB" cpack -G DEB --config ${VITPE_BINARY_DIR}/CPackConfig.cmake
  -B ${WORK_DIR}/deb)
file(GLOB debs ${WORK_DIR}/deb/*.deb)
list(LENGTH debs n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "cpack: expected two packages (vitpe, libvitpe-dev), found ${debs}")
endif()
set(root ${WORK_DIR}/root)
foreach(deb ${debs})
  vitpe_run("dpkg-deb -f ${deb}" dpkg-deb -f ${deb} Package Depends)
  message(STATUS "${deb}:\n${output}")
  # Every dependency names a package Debian has (this machine built vitpe, so it has them).
  string(REGEX MATCH "Depends: ([^\n]*)" depends "${output}")
  string(REGEX REPLACE "\\([^)]*\\)" "" depends "${CMAKE_MATCH_1}")
  string(REPLACE "," ";" depends "${depends}")
  foreach(d ${depends})
    string(STRIP "${d}" d)
    if(d MATCHES "^(vitpe|libvitpe-dev)$")
      continue()
    endif()
    vitpe_run("dpkg-query for ${deb}'s dependency '${d}'" dpkg-query -W ${d})
  endforeach()
  # The command's package recommends OpenCV's videoio (its video module's one dependency beyond
  # the library's), a real Debian package.
  vitpe_run("dpkg-deb -f ${deb}" dpkg-deb -f ${deb} Package Recommends)
  if(output MATCHES "Package: vitpe\n")
    vitpe_expect("${output}" "Recommends: libopencv-videoio406" "the vitpe package's Recommends")
    vitpe_run("dpkg-query for the recommended libopencv-videoio406" dpkg-query -W
      libopencv-videoio406)
  endif()
  vitpe_run("dpkg-deb -x ${deb}" dpkg-deb -x ${deb} ${root})
endforeach()
file(GLOB_RECURSE root_pc ${root}/usr/*/vitpe.pc)
get_filename_component(root_libdir ${root_pc} DIRECTORY)
get_filename_component(root_libdir ${root_libdir} DIRECTORY)
vitpe_check_layout(${root}/usr ${root_libdir})
vitpe_consumer(${root}/usr ${WORK_DIR}/build_deb)
vitpe_run("the packaged vitpe --version" ${root}/usr/bin/vitpe --version)
vitpe_expect("${output}" "data folder: ${root}/usr/share/vitpe" "the packaged command's data folder")
vitpe_video_module(${root}/usr/bin/vitpe)
