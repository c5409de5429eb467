# tiered_check.cmake: the CTest samples_dlrm_tiered (samples/CMakeLists.txt). Runs
# `dlrm --tiered` (device/host tiers, the key stage feeding the steps) on the cpu device and on
# the separate_memory test device (its device tier in an arena the host cannot touch, every swap
# through its deferred copy stream) with SessionConfig::deterministic, and fails unless the two
# trained bitwise alike (losses_fnv), the loss fell, and rows were swapped out of the
# separate_memory device tier (so the run crossed its asynchronous swap-outs).
# Inputs: -DDLRM=<the dlrm program> -DWORK=<a directory for the data and the config file>.
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/deterministic.json "{\"deterministic\": true}\n")
set(common --data ${WORK}/data.bin --batches 8 --batch 256 --vocab 4000 --warmup 0 --windows 1
           --window_steps 16 --tiered --device_rows 400 --optimizer adagrad
           --session_config ${WORK}/deterministic.json)
foreach(device cpu separate_memory)
  execute_process(COMMAND ${DLRM} ${common} --device ${device} OUTPUT_VARIABLE out
                  ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dlrm --tiered --device ${device} failed (${rc}): ${err}")
  endif()
  message(STATUS "${device}: ${out}")
  foreach(field losses_fnv first_loss loss swap_out_bytes)
    if(NOT out MATCHES "\"${field}\":\"?([0-9a-f.]+)")
      message(FATAL_ERROR "dlrm --tiered --device ${device}: no ${field} in its line: ${out}")
    endif()
    set(${device}_${field} ${CMAKE_MATCH_1})
  endforeach()
endforeach()
if(NOT cpu_losses_fnv STREQUAL separate_memory_losses_fnv)
  message(FATAL_ERROR "dlrm --tiered: the losses on separate_memory (fnv "
                      "${separate_memory_losses_fnv}) differ from cpu's (${cpu_losses_fnv})")
endif()
if(NOT separate_memory_loss LESS separate_memory_first_loss)
  message(FATAL_ERROR "dlrm --tiered did not learn: loss ${separate_memory_loss} after first "
                      "loss ${separate_memory_first_loss}")
endif()
if(NOT separate_memory_swap_out_bytes GREATER 0)
  message(FATAL_ERROR "dlrm --tiered on separate_memory swapped no row out of the device tier; "
                      "lower --device_rows so that the batches' keys overflow it")
endif()
message(STATUS "dlrm_tiered_equal=1 losses_fnv=${cpu_losses_fnv} loss ${cpu_first_loss} -> "
               "${cpu_loss}, separate_memory swap_out_bytes ${separate_memory_swap_out_bytes}")
