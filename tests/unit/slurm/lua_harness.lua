-- Runs job_submit.lua's real slurm_job_submit hook outside slurmctld, for the option-grammar tests.
--   lua5.1 lua_harness.lua <path of job_submit.lua>   < cases
-- Each input line is one submission of a 1-GPU batch job to partition gpu: tab-separated fields, the first
-- the comment ("\1" for none), the others spank_job_env entries. Each output line is "ok <AdminComment>"
-- or "err <message the user would see>". The stub `slurm` table holds only what the script uses.
local script = arg[1]
local user_messages = {}
slurm = {
  SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254,
  NO_VAL64 = 18446744073709551614, INFINITE = 4294967295,
  log_user = function(fmt, ...) user_messages[#user_messages + 1] = string.format(fmt, ...) end,
  log_info = function() end, log_error = function() end, log_verbose = function() end,
  log_debug = function() end,
}
dofile(script)

local function split(line)
  local out = {}
  for field in (line .. "\t"):gmatch("([^\t]*)\t") do out[#out + 1] = field end
  return out
end

for line in io.lines() do
  local f = split(line)
  local env = nil
  if #f > 1 then
    env = {}
    for i = 2, #f do env[i - 2] = f[i] end   -- slurmctld's table is indexed from 0
  end
  local job = { comment = (f[1] ~= "\1") and f[1] or nil, spank_job_env = env, partition = "gpu",
                tres_per_node = "gres:gpu:1", script = "#!/bin/sh\n", requeue = slurm.NO_VAL,
                het_job_offset = slurm.NO_VAL, priority = slurm.NO_VAL }
  user_messages = {}
  local rc = slurm_job_submit(job, { gpu = { flag_default = 1 } }, 1000)
  if rc == slurm.SUCCESS then
    io.write("ok ", tostring(job.admin_comment), "\n")
  else
    io.write("err ", table.concat(user_messages, " | "), "\n")
  end
end
