-- Runs job_submit.lua's real slurm_job_submit hook outside slurmctld, for the option-grammar tests.
--   lua5.1 lua_harness.lua <path of job_submit.lua>   < cases
-- Each input line is one submission of a 1-GPU batch job to partition gpu: tab-separated fields, the first
-- the comment ("\1" for none), the others spank_job_env entries, except "@array=SPEC" (--array),
-- "@nodes=HOSTLIST" (-w) and "@hold" (--hold), which set those submit options instead. Each output line is "ok <AdminComment>"
-- or "err <message the user would see>". The stub `slurm` table holds only what the script uses.
local script = arg[1]
local user_messages = {}
slurm = {
  SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254,
  NO_VAL64 = 18446744073709551614, INFINITE = 4294967295,
  log_user = function(fmt, ...) user_messages[#user_messages + 1] = string.format(fmt, ...) end,
  log_info = function() end, log_verbose = function() end,
  -- HARNESS_LOG_ERRORS=1: slurmctld's log errors (a bad config setting) go to stderr, for the tests to read
  log_error = function(fmt, ...)
    if os.getenv("HARNESS_LOG_ERRORS") then io.stderr:write(string.format(fmt, ...), "\n") end
  end,
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
  local env, array_inx, req_nodes, priority = nil, nil, nil, slurm.NO_VAL
  while #f > 1 and f[2]:sub(1, 1) == "@" do
    local opt = table.remove(f, 2)
    if opt:sub(1, 7) == "@array=" then array_inx = opt:sub(8)
    elseif opt:sub(1, 7) == "@nodes=" then req_nodes = opt:sub(8)
    elseif opt == "@hold" then priority = 0 end
  end
  if #f > 1 then
    env = {}
    for i = 2, #f do env[i - 2] = f[i] end   -- slurmctld's table is indexed from 0
  end
  local job = { comment = (f[1] ~= "\1") and f[1] or nil, spank_job_env = env, partition = "gpu",
                tres_per_node = "gres:gpu:1", script = "#!/bin/sh\n", requeue = slurm.NO_VAL,
                het_job_offset = slurm.NO_VAL, priority = priority, array_inx = array_inx,
                req_nodes = req_nodes }
  user_messages = {}
  local rc = slurm_job_submit(job, { gpu = { flag_default = 1 } }, 1000)
  if rc == slurm.SUCCESS then
    local hold = ""
    if os.getenv("HARNESS_SHOW_HOLD") then hold = job.priority == 0 and " [held]" or " [not held]" end
    local comment = ""
    if os.getenv("HARNESS_SHOW_COMMENT") then comment = " comment=" .. tostring(job.comment) end
    io.write("ok ", tostring(job.admin_comment), hold, comment, "\n")
  else
    io.write("err ", table.concat(user_messages, " | "), "\n")
  end
end
