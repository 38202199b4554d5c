# The floors of attnlab (README "Architecture") as a build fact: every
# #include "folder/..." in a source folder must name that folder or one below
# it. Run at every build (target attnlab_floor_includes):
#   cmake -DSOURCE_DIR=<checkout> -P cmake/check_floors.cmake
# Fails with one line per include that reaches upwards.

# folder -> the folders its files may include
set(allowed_autograd autograd)
set(allowed_cuda autograd cuda)
set(allowed_layers autograd layers)
set(allowed_optim autograd optim)
set(allowed_data autograd data)
set(allowed_experiments_files autograd data experiments/files)
set(allowed_experiments_config autograd data layers experiments/files experiments/config)
set(allowed_experiments_distributed autograd layers experiments/distributed)
set(below_run autograd data layers optim experiments/files experiments/config experiments/distributed)
set(allowed_experiments_run ${below_run} experiments/run)
set(allowed_experiments_sweep ${below_run} experiments/run experiments/sweep)
set(allowed_experiments_analysis ${below_run} experiments/run experiments/analysis)
set(allowed_experiments_interop ${below_run} experiments/run experiments/interop)
set(allowed_experiments_cli ${below_run} experiments/run experiments/sweep experiments/analysis experiments/interop experiments/cli)

set(violations "")
foreach(folder autograd cuda layers optim data experiments/files experiments/config experiments/distributed
               experiments/run experiments/sweep experiments/analysis experiments/interop experiments/cli)
  string(REPLACE "/" "_" key "${folder}")
  set(allowed ${allowed_${key}})
  file(GLOB_RECURSE sources "${SOURCE_DIR}/${folder}/*.h" "${SOURCE_DIR}/${folder}/*.cpp" "${SOURCE_DIR}/${folder}/*.cu"
       "${SOURCE_DIR}/${folder}/*.cuh")
  foreach(source ${sources})
    file(STRINGS "${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
    foreach(line ${includes})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*$" "\\1" target "${line}")
      set(ok FALSE)
      foreach(prefix ${allowed})
        string(FIND "${target}" "${prefix}/" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        file(RELATIVE_PATH where "${SOURCE_DIR}" "${source}")
        string(REPLACE ";" ", " listed "${allowed}")
        string(APPEND violations "  ${where} includes \"${target}\": ${folder}/ may include only ${listed}\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "attnlab: includes that reach a floor above their own (README \"Architecture\"):\n${violations}")
endif()
