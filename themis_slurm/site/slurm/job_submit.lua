--[[
job_submit.lua - themis-slurm's gatekeeper inside slurmctld (Slurm 22.05 or later, JobSubmitPlugins=lua).

WHAT IT DOES
  Themis (finish-time-fair GPU scheduling, Mahajan et al., NSDI 2020) decides OUTSIDE Slurm which jobs get
  which GPUs. Slurm has no external-scheduler protocol, so the pattern is: hold managed jobs at submit, let
  the themisd daemon decide, pin a job to nodes (ReqNodeList) and release it. This script is the "hold at
  submit" half, and it closes the doors through which a user could start a held job behind Themis's back.

  At submit (slurm_job_submit), for a job that asks for GPUs in a managed partition (config below):
    * its Themis options are checked: given as  sbatch --themis-app=... --themis-est=...  (the SPANK plugin
      in spank/ of the site files, which checks them at the client too and passes them here in spank_job_env as
      THEMIS_OPTIONS=key=value,...) or, without the plugin, in --comment as  themis:key=value,...  ; a bad
      option REJECTS the submission with a message that names the option, the value and what is accepted.
      This check is the authority: any user can run a client without the plugin's checks. Options given
      both ways at once are refused;
    * a normalised, trusted record is written to the job's AdminComment, which users cannot change:
          themis:v1;app=<name>;model=<model>;sens=<class>;est=<seconds>[;ckpt=..][;throttle=..][;nodes=..]
      (the first four always present and in this order, values may be empty; est is whole seconds). The daemon
      reads THIS record, never the user-editable Comment;
    * in mode "enforce" the job is held (priority 0, Reason JobHeldUser) and made requeueable;
      in mode "observe" it is not held; in mode "off" nothing at all happens.
  At update (slurm_job_modify), for jobs in managed partitions and users who are not Themis operators,
  DENY BY DEFAULT: an update is accepted only when every field it sets is on a short allowlist that cannot
  start, move, widen or reprioritise the job (see OWNER_MAY_SET and UPDATE_FIELDS below):
    * allowed: Comment (progress reports), Name, MailType/MailUser, a TimeLimit no longer than the current;
    * the owner's `scontrol hold`/`uhold` is recorded as the option hold=user in the Comment (the job stays
      held by Themis, and themisd grants it nothing until that option is gone); the owner's
      `scontrol release` removes hold=user and is refused when there is none ("Job is in held state,
      pending scheduler release"); any other priority change is refused the same way;
    * everything else (Nice, Partition, node lists, features, GPU request, QOS, Account, Dependency,
      BeginTime, Requeue=0, ...) is refused with "Access/permission denied", and the field is named in
      slurmctld's log (and to the user on Slurm 24.05 and later);
    * moving an unmanaged job into a managed partition or adding GPUs to a CPU job there is refused too.
  scancel is not an update at all. Root, the SlurmUser and the configured operators may do anything.
  Two things slurmctld does before this hook runs, so it cannot refuse them: ArrayTaskThrottle (only
  changes how many tasks Themis may grant at once) and the admin-only AdminComment check.

  Note: Slurm 22.05 discards slurm.log_user() messages in slurm_job_modify (only slurm_job_submit can talk to
  the user), so a refused update is reported through the error code; the reason goes to slurmctld's log.

THE OPTION GRAMMAR (defined once in themis_slurm/slurm/option_grammar.py, which generates the tables
between the GENERATED GRAMMAR markers below, the plugin's header and docs/user-guide.md's table)
  comment  := "themis:" [ options ] [ ";" free-text ]
  THEMIS_OPTIONS=options                  (the plugin's spank_job_env entry: one option per --themis-KEY)
  options  := option { "," option }       option := key "=" value   (spaces around both are ignored)
  app      := APP_PATTERN, at most APP_MAX_LEN characters (groups a user's jobs into one app, per user)
  model    := one of KNOWN_MODELS or of the config's extra_models (the site's own classes, defined in
              themis.yaml's models: section; placement profile of the job's model)
  sens     := one of KNOWN_SENS            (placement sensitivity class; not with model)
  est      := 90s | 45m | 6h | 2d | 1h30m | [D-]HH:MM:SS, above 0 and at most MAX_EST_SECONDS (the expected
              run time on the GPUs requested)
  ckpt     := one of CKPT_WORDS | a duration as for est (when the job saves its state: at Themis's warning,
              never, or every so often; a preemption loses what it did since its last save)
  A comment that does not start with "themis:" is free text and ignored. Keys are case-insensitive, each
  key at most once; model/sens/est/ckpt values are case-insensitive, app names are kept as written.

INSTALL
  Copy this file and themis_job_submit.conf.lua next to slurm.conf (e.g. /etc/slurm/), set
  JobSubmitPlugins=lua in slurm.conf and `scontrol reconfigure` (see slurm.conf.snippet beside this file).
  slurmctld reloads this script by itself when its mtime changes (an edit in the same second as the last
  load can go unnoticed: touch the file again). A script that fails to load keeps the previous one running.

PERFORMANCE
  The hooks run inside slurmctld's locks for every submission and update: they do no I/O except re-reading
  the small config file at most every reload_seconds, and no external commands.
--]]

-- ------------------------------------------------------------------------------------------- constants
local RECORD_PREFIX = "themis:v1"     -- first field of the AdminComment record; bump on format changes
local COMMENT_PREFIX = "themis:"      -- user options in --comment start with this (case-insensitive)
local CONFIG_FILE = "themis_job_submit.conf.lua"
local NO_VAL = slurm.NO_VAL or 4294967294
local NO_VAL16 = slurm.NO_VAL16 or 65534
local INFINITE = slurm.INFINITE or 4294967295
-- Slurm error codes returned by slurm_job_modify; the client prints their text. Not all are exported to
-- Lua; their numbers are part of Slurm's wire protocol (slurm/slurm_errno.h) and stable across releases.
local ESLURM_ACCESS_DENIED = slurm.ESLURM_ACCESS_DENIED or 2002   -- "Access/permission denied"
local ESLURM_JOB_HELD = 2042          -- "Job is in held state, pending scheduler release"

-- BEGIN GENERATED GRAMMAR (generated from themis_slurm/slurm/option_grammar.py (python -m themis_slurm.slurm.option_grammar --write): do not edit)
local APP_MAX_LEN = 64
local APP_PATTERN = "^[A-Za-z0-9][A-Za-z0-9%_%.%-]*$"
local MAX_EST_SECONDS = 31536000
local SPANK_ENV_NAME = "THEMIS_OPTIONS"
local MODEL_NAME_MAX_LEN = 32
local MODEL_NAME_PATTERN = "^[a-z0-9][a-z0-9%-%_%.]*$"
local MODEL_NAME_EXPECTED = "a name of 1 to 32 lower-case letters, digits, '-', '_' or '.' starting with a letter or digit"
local KNOWN_KEYS = { "app", "model", "sens", "est", "ckpt" }
local KNOWN_MODELS = { "vgg11", "vgg16", "vgg19", "alexnet", "resnet50", "resnet101", "resnet152", "inception3", "inception4", "googlenet", "transformer-dp", "transformer-tp", "moe", "finetune" }
local KNOWN_SENS = { "high", "medium", "low", "none" }
local CKPT_WORDS = { "yes", "no" }
local EXCLUSIVE = { "model", "sens" }
local EXPECTED = {
  app = "a name of 1 to 64 letters, digits, '_', '.' or '-' starting with a letter or digit",
  model = "one of vgg11, vgg16, vgg19, alexnet, resnet50, resnet101, resnet152, inception3, inception4, googlenet, transformer-dp, transformer-tp, moe, finetune",
  sens = "one of high, medium, low, none",
  est = "a duration above 0 and at most 365 days such as 90m, 6h, 1h30m, 2d, 1-12:00:00",
  ckpt = "yes, no, or how often it saves: a duration above 0 and at most 365 days such as 30m, 2h",
}
-- END GENERATED GRAMMAR

local DEFAULTS = {
  managed_partitions = { "gpu" },
  mode = "enforce",
  operators = { "themis" },
  allow_interactive = false,
  reload_seconds = 60,
  heartbeat_file = "/run/themis/heartbeat",
  -- off unless the config file turns it on (the shipped one does): a site that upgrades job_submit.lua
  -- before themisd and its unit must not find its jobs unheld because no heartbeat is written yet
  fail_open_after_s = 0,
  -- the site's own model classes (themis.yaml models:), accepted by --themis-model besides KNOWN_MODELS
  extra_models = {},
}

-- --------------------------------------------------------------------------------------- small helpers
local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

local SENS_SET, KEY_SET = set_of(KNOWN_SENS), set_of(KNOWN_KEYS)
local CKPT_SET = set_of(CKPT_WORDS)

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- Values echoed back to the user are shortened: a message must stay readable.
local function shown(v)
  if #v > 40 then return v:sub(1, 37) .. "..." end
  return v
end

local function split_commas(s)
  local out = {}
  if s == nil then return out end
  for item in s:gmatch("[^,]+") do
    item = trim(item)
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

-- Directory of this script: the config file and slurm.conf live next to it. slurmctld loads the script
-- with luaL_loadfile(<dir of slurm.conf>/job_submit.lua), so the chunk's source is "@<that path>".
local function script_dir()
  local info = debug.getinfo(1, "S")
  local src = info and info.source or ""
  if src:sub(1, 1) == "@" then
    local dir = src:sub(2):match("^(.*)/[^/]*$")
    if dir and dir ~= "" then return dir end
  end
  return "/etc/slurm"
end

local SCRIPT_DIR = script_dir()

-- ------------------------------------------------------------------------------------------ config load
-- name -> uid from /etc/passwd (read only when the config is (re)loaded).
local function passwd_uids()
  local uids = {}
  local f = io.open("/etc/passwd", "r")
  if not f then return uids end
  for line in f:lines() do
    local name, uid = line:match("^([^:]+):[^:]*:(%d+):")
    if name then uids[name] = tonumber(uid) end
  end
  f:close()
  return uids
end

-- SlurmUser from the slurm.conf next to this script (Slurm's default is root).
local function slurm_user_name()
  local f = io.open(SCRIPT_DIR .. "/slurm.conf", "r")
  if not f then return "root" end
  local user = "root"
  for line in f:lines() do
    local v = line:lower():match("^%s*slurmuser%s*=%s*([%w_.%-]+)")
    if v then user = line:match("=%s*([%w_.%-]+)") end
  end
  f:close()
  return user
end

-- Reads the config file in an empty sandbox. Returns a table or nil, error.
local function read_config_file(path)
  -- Lua 5.1 (Debian's Slurm 22.05) sandboxes with setfenv; 5.2+ (Slurm built against 5.3/5.4) with
  -- loadfile's env argument. Either way the file sees an empty environment.
  local chunk, err
  if setfenv then
    chunk, err = loadfile(path)
    if chunk then setfenv(chunk, {}) end
  else
    chunk, err = loadfile(path, "t", {})
  end
  if not chunk then return nil, err end
  local ok, result = pcall(chunk)
  if not ok then return nil, tostring(result) end
  if type(result) ~= "table" then return nil, "it must `return { ... }` (a table)" end
  return result
end

-- extra_models: a list of names by the grammar's rule, none of them a sensitivity class (those are
-- --themis-sens values; themis.yaml may change their factors without any change here). Returns true, or
-- false and why.
local function check_extra_models(v)
  if type(v) ~= "table" then return false, "not a list of names" end
  for _, name in ipairs(v) do
    if type(name) ~= "string" or #name > MODEL_NAME_MAX_LEN or not name:match(MODEL_NAME_PATTERN) then
      return false, string.format("%s is not %s", shown(tostring(name)), MODEL_NAME_EXPECTED)
    end
    if SENS_SET[name] then
      return false, string.format("%s is a sensitivity class (--themis-sens), not a model", name)
    end
  end
  return true
end

-- Merges the file's values over DEFAULTS, checking each; bad entries are logged and defaulted.
local function build_config(raw)
  local cfg = {}
  for k, v in pairs(DEFAULTS) do cfg[k] = v end
  for k, v in pairs(raw or {}) do
    local ok = true
    if k == "managed_partitions" then
      ok = type(v) == "table"
      if ok then for _, p in ipairs(v) do if type(p) ~= "string" then ok = false end end end
    elseif k == "mode" then
      ok = (v == "enforce" or v == "observe" or v == "off")
    elseif k == "operators" then
      ok = type(v) == "table"
    elseif k == "allow_interactive" then
      ok = type(v) == "boolean"
    elseif k == "reload_seconds" then
      ok = type(v) == "number" and v >= 1
    elseif k == "heartbeat_file" then
      ok = type(v) == "string"
    elseif k == "fail_open_after_s" then
      ok = type(v) == "number" and v >= 0
    elseif k == "extra_models" then
      local why
      ok, why = check_extra_models(v)
      if not ok then
        slurm.log_error("themis: %s: bad value for 'extra_models' (%s), using the default (none)", CONFIG_FILE,
                        why)
        ok = nil
      end
    else
      slurm.log_error("themis: %s: unknown setting '%s' ignored", CONFIG_FILE, tostring(k))
      ok = nil
    end
    if ok then
      cfg[k] = v
    elseif ok == false then
      slurm.log_error("themis: %s: bad value for '%s', using the default", CONFIG_FILE, k)
    end
  end
  cfg.managed = set_of(cfg.managed_partitions)
  -- the models --themis-model accepts: the built-in ones, then the site's own (in the error message too)
  cfg.model_set = set_of(KNOWN_MODELS)
  cfg.expected_model = EXPECTED.model
  local extra = {}
  for _, name in ipairs(cfg.extra_models) do
    if not cfg.model_set[name] then
      cfg.model_set[name] = true
      extra[#extra + 1] = name
    end
  end
  if #extra > 0 then cfg.expected_model = EXPECTED.model .. ", " .. table.concat(extra, ", ") end
  -- Operator uids: root, SlurmUser, and the configured names/uids.
  local uids = passwd_uids()
  cfg.operator_uids = { [0] = true }
  local su = slurm_user_name()
  if uids[su] then cfg.operator_uids[uids[su]] = true
  elseif tonumber(su) then cfg.operator_uids[tonumber(su)] = true end
  for _, op in ipairs(cfg.operators) do
    if type(op) == "number" then
      cfg.operator_uids[op] = true
    elseif tonumber(op) then
      cfg.operator_uids[tonumber(op)] = true
    elseif uids[op] then
      cfg.operator_uids[uids[op]] = true
    else
      slurm.log_verbose("themis: operator '%s' is not in /etc/passwd; list its uid instead", tostring(op))
    end
  end
  return cfg
end

local current_config, config_loaded_at = nil, 0

-- The config in force, re-read at most every reload_seconds. On a broken file the previous config (or the
-- defaults, on the first load) stays in force: submission must never break because of a typo.
local function config()
  local now = os.time()
  if current_config and now - config_loaded_at < current_config.reload_seconds then
    return current_config
  end
  config_loaded_at = now
  local path = SCRIPT_DIR .. "/" .. CONFIG_FILE
  local raw, err = read_config_file(path)
  if raw then
    current_config = build_config(raw)
  else
    slurm.log_error("themis: cannot use %s (%s); keeping %s", path, tostring(err),
                    current_config and "the previous config" or "the defaults")
    current_config = current_config or build_config({})
  end
  return current_config
end

-- ------------------------------------------------------------------------------------------- fail-open
-- themisd rewrites heartbeat_file ("<unix time> <pid> <host>") after every cycle. Once it is older than
-- fail_open_after_s (or missing), themisd is taken to be gone and new jobs are not held, so that nothing
-- waits forever for a scheduler that is not there; `themisd failopen` (a systemd timer) releases the jobs
-- held before. The record is still written: themisd holds or adopts the jobs again when it is back. One
-- small read; a fresh heartbeat is kept for HEARTBEAT_READ_S seconds (submissions come in bursts), a
-- missing or old one is read again at the next submission (themisd may just have come back).
local HEARTBEAT_READ_S = 5
local heartbeat_seen, heartbeat_read_at = nil, -math.huge

local function heartbeat_age(cfg, now)
  local fresh = heartbeat_seen ~= nil and now - heartbeat_seen <= cfg.fail_open_after_s
  if not fresh or now - heartbeat_read_at >= HEARTBEAT_READ_S then
    heartbeat_read_at = now
    heartbeat_seen = nil
    local f = io.open(cfg.heartbeat_file, "r")
    if f then
      heartbeat_seen = tonumber((f:read("*l") or ""):match("^%s*([%d%.]+)"))
      f:close()
    end
  end
  if heartbeat_seen == nil then return nil end
  return now - heartbeat_seen
end

-- True when the gate is open: fail-open is on and themisd's heartbeat is missing or too old.
local function failing_open(cfg)
  if cfg.fail_open_after_s <= 0 or cfg.heartbeat_file == "" then return false end
  local age = heartbeat_age(cfg, os.time())
  return age == nil or age > cfg.fail_open_after_s
end

-- -------------------------------------------------------------------------------------- option parsing
-- Duration -> seconds, or nil. Accepts 90s, 45m, 6h, 2d, 1h30m (units d h m s, each once, in that order)
-- and [D-]HH:MM:SS (minutes and seconds below 60).
local function parse_duration(v)
  v = v:lower()
  local d, h, m, s = v:match("^(%d+)%-(%d+):(%d%d):(%d%d)$")
  if not d then
    h, m, s = v:match("^(%d+):(%d%d):(%d%d)$")
    d = "0"
  end
  if h then
    if #d > 3 or #h > 4 or tonumber(m) >= 60 or tonumber(s) >= 60 then return nil end
    return tonumber(d) * 86400 + tonumber(h) * 3600 + tonumber(m) * 60 + tonumber(s)
  end
  local unit_seconds = { d = 86400, h = 3600, m = 60, s = 1 }
  local order = { d = 1, h = 2, m = 3, s = 4 }
  local total, last, rest = 0, 0, v
  if rest == "" then return nil end
  while rest ~= "" do
    local num, unit, tail = rest:match("^(%d+)([dhms])(.*)$")
    if not num or #num > 9 or order[unit] <= last then return nil end
    total = total + tonumber(num) * unit_seconds[unit]
    last, rest = order[unit], tail
  end
  return total
end

-- Where options came from, for messages: the user reads the option the way they wrote it.
local SOURCES = {
  comment = { where = " in --comment", name = function(key) return key end },
  spank = { where = "", name = function(key) return "--themis-" .. key end },
}

local function invalid(src, key, value, cfg)
  return string.format("themis: invalid option %s=%s%s: expected %s", src.name(key), shown(value), src.where,
                       key == "model" and cfg.expected_model or EXPECTED[key])
end

-- Parses a list of options  key=value,key=value  (the grammar above) given through `source`
-- ("comment" or "spank") under the config `cfg` (its models). Returns opts {app=, model=, sens=,
-- est=(seconds), ckpt=("yes", "no" or seconds)} or nil, message for the user.
local function parse_options(options, source, cfg)
  local src = SOURCES[source]
  local opts = {}
  if trim(options) == "" then return opts end
  for item in (options .. ","):gmatch("([^,]*),") do
    item = trim(item)
    if item == "" then
      return nil, string.format("themis: empty option%s (two commas in a row?): write key=value,key=value",
                                src.where)
    end
    local key, value = item:match("^([^=]*)=(.*)$")
    if not key then
      return nil, string.format("themis: option '%s'%s has no value: write key=value (known keys: %s)",
                                shown(item), src.where, table.concat(KNOWN_KEYS, ", "))
    end
    key, value = trim(key):lower(), trim(value)
    if not KEY_SET[key] then
      return nil, string.format("themis: unknown option '%s'%s: known options are %s",
                                shown(key), src.where, table.concat(KNOWN_KEYS, ", "))
    end
    if opts[key] ~= nil then
      return nil, string.format("themis: option %s given twice%s", src.name(key), src.where)
    end
    if key == "app" then
      if not (value:match(APP_PATTERN) and #value <= APP_MAX_LEN) then return nil, invalid(src, key, value, cfg) end
      opts.app = value
    elseif key == "model" then
      if not cfg.model_set[value:lower()] then return nil, invalid(src, key, value, cfg) end
      opts.model = value:lower()
    elseif key == "sens" then
      if not SENS_SET[value:lower()] then return nil, invalid(src, key, value, cfg) end
      opts.sens = value:lower()
    elseif key == "est" then
      local seconds = parse_duration(value)
      if not seconds or seconds <= 0 or seconds > MAX_EST_SECONDS then return nil, invalid(src, key, value, cfg) end
      opts.est = seconds
    elseif key == "ckpt" then
      if CKPT_SET[value:lower()] then
        opts.ckpt = value:lower()
      else
        local seconds = parse_duration(value)
        if not seconds or seconds <= 0 or seconds > MAX_EST_SECONDS then return nil, invalid(src, key, value, cfg) end
        opts.ckpt = string.format("%d", seconds)
      end
    end
  end
  if opts[EXCLUSIVE[1]] and opts[EXCLUSIVE[2]] then
    return nil, string.format("themis: options %s and %s%s are mutually exclusive: give a model or a " ..
                              "sensitivity class, not both", src.name(EXCLUSIVE[1]), src.name(EXCLUSIVE[2]),
                              src.where)
  end
  return opts
end

-- Parses a job comment. Returns:
--   nil                  the comment carries no Themis options (absent, or free text)
--   opts                 a table {app=, model=, sens=, est=(seconds), ckpt=} (absent keys are nil)
--   nil, message         the options are invalid; message is for the user
local function parse_comment(comment, cfg)
  if comment == nil then return nil end
  local s = trim(comment)
  if s:sub(1, #COMMENT_PREFIX):lower() ~= COMMENT_PREFIX then return nil end
  return parse_options(s:sub(#COMMENT_PREFIX + 1):match("^([^;]*)"), "comment", cfg)  -- free text after ';'
end

-- The options the SPANK plugin (spank/ of the site files) passed in spank_job_env as THEMIS_OPTIONS=<options>
-- (slurmctld may show it prefixed SPANK_). Same returns as parse_comment. The plugin checked them at the
-- client, but any client can send any spank_job_env: they are checked again here, as strictly.
local function parse_spank_env(env, cfg)
  if type(env) ~= "table" then return nil end
  local found
  for _, entry in pairs(env) do
    if type(entry) == "string" then
      local name, value = entry:match("^([^=]*)=(.*)$")
      if name == SPANK_ENV_NAME or name == "SPANK_" .. SPANK_ENV_NAME then
        if found ~= nil then
          return nil, "themis: the Themis options were sent twice (" .. SPANK_ENV_NAME .. "): submit again"
        end
        found = value
      end
    end
  end
  if found == nil then return nil end
  return parse_options(found, "spank", cfg)
end

-- The job's Themis options from either source. Both at once is refused: which one would win is a guess.
local function job_options(job_desc, cfg)
  local from_spank, err = parse_spank_env(job_desc.spank_job_env, cfg)
  if err then return nil, err end
  local from_comment, cerr = parse_comment(job_desc.comment, cfg)
  if cerr then return nil, cerr end
  if from_spank and from_comment and next(from_comment) ~= nil then
    return nil, "themis: Themis options given both as --themis-* and in --comment=themis:...: give them " ..
                "one way (the --themis-* options; --comment is the fallback for clients without the plugin)"
  end
  return from_spank or from_comment
end

-- The trusted record stored in AdminComment. Keep it short and stable: the daemon parses it.
local function record(opts, throttle, nodes)
  opts = opts or {}
  local out = string.format("%s;app=%s;model=%s;sens=%s;est=%s", RECORD_PREFIX, opts.app or "",
                            opts.model or "", opts.sens or "", opts.est and string.format("%d", opts.est) or "")
  -- how the job saves its state (yes, no or an interval in whole seconds), only when the owner said
  if opts.ckpt then out = out .. ";ckpt=" .. opts.ckpt end
  if throttle then out = out .. ";throttle=" .. throttle end
  -- the owner's -w list: Themis's pin replaces ReqNodeList, so the list it must choose within is kept here
  -- (a hostlist has no ';' or '='; anything else is not recorded and Slurm's own check stays)
  if nodes ~= nil and nodes ~= "" and not tostring(nodes):find("[;=%s]") then
    out = out .. ";nodes=" .. tostring(nodes)
  end
  return out
end

-- The %N throttle of an array at submit ("0-99%8" -> "8"), kept in the trusted record: slurmctld applies
-- an owner's `scontrol update ArrayTaskThrottle=` before slurm_job_modify can refuse it, so themisd counts
-- the throttle recorded here, never more than it.
local function array_throttle(array_inx)
  if array_inx == nil then return nil end
  local n = tostring(array_inx):match("%%%s*(%d+)%s*$")
  if n == nil or tonumber(n) == 0 then return nil end
  return string.format("%d", tonumber(n))
end

-- ------------------------------------------------------------------------------------ job classification
-- True when a TRES/GRES request string asks for at least one GPU. Slurm 22.05 writes them as
-- "gres:gpu:2", "gres:gpu:a100:2", "gres:gpu" (newer releases: "gres/gpu:2"); several are comma separated.
local function asks_gpus(tres)
  if tres == nil or tres == "" then return false end
  for entry in tres:gmatch("[^,]+") do
    local e = trim(entry):gsub("^gres[:/]", "")
    local name, rest = e:match("^([^:=]+)(.*)$")
    if name == "gpu" then
      local count = rest:match("[:=](%d+)$")
      if count == nil or tonumber(count) > 0 then return true end
    end
  end
  return false
end

local function job_asks_gpus(j)
  return asks_gpus(j.tres_per_node) or asks_gpus(j.tres_per_job) or asks_gpus(j.tres_per_socket)
      or asks_gpus(j.tres_per_task)
end

-- The partitions a submission names, or the default partition when it names none.
local function submit_partitions(job_desc, part_list)
  local parts = split_commas(job_desc.partition)
  if #parts == 0 and part_list then
    for name, part in pairs(part_list) do
      if part.flag_default == 1 then parts[1] = name; break end
    end
  end
  return parts
end

local function count_managed(cfg, parts)
  local n = 0
  for _, p in ipairs(parts) do if cfg.managed[p] then n = n + 1 end end
  return n
end

local function is_set_num(v, none)
  return v ~= nil and v ~= none
end

-- Hold by the owner. Slurm cannot tell the owner's hold from Themis's (both are priority 0, JobHeldUser),
-- so job_submit.lua records it as the option  hold=user  in the Comment's themis: options, where themisd
-- reads it (the job is then ineligible for grants), and the owner's `scontrol release` removes it again.
-- The job itself stays held by Themis throughout. The owner can also write or remove the option directly.
local USER_HOLD_OPTION = "hold=user"

local function comment_has_user_hold(comment)
  if comment == nil then return false end
  local s = trim(comment)
  if s:sub(1, #COMMENT_PREFIX):lower() ~= COMMENT_PREFIX then return false end
  local options = s:sub(#COMMENT_PREFIX + 1):match("^([^;]*)")
  for item in options:gmatch("[^,]+") do
    local k, v = item:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k and k:lower() == "hold" and v:lower() == "user" then return true end
  end
  return false
end

local function comment_with_user_hold(comment)
  local s = trim(comment or "")
  if comment_has_user_hold(s) then return s end
  if s:sub(1, #COMMENT_PREFIX):lower() == COMMENT_PREFIX then
    local body = s:sub(#COMMENT_PREFIX + 1)
    local options, rest = body:match("^([^;]*)(.*)$")
    if trim(options) == "" then return COMMENT_PREFIX .. USER_HOLD_OPTION .. rest end
    return COMMENT_PREFIX .. options .. "," .. USER_HOLD_OPTION .. rest
  end
  if s == "" then return COMMENT_PREFIX .. USER_HOLD_OPTION end
  return COMMENT_PREFIX .. USER_HOLD_OPTION .. ";" .. s
end

local function comment_without_user_hold(comment)
  local s = trim(comment or "")
  local body = s:sub(#COMMENT_PREFIX + 1)
  local options, rest = body:match("^([^;]*)(.*)$")
  local kept = {}
  for item in options:gmatch("[^,]+") do
    local k, v = item:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if not (k and k:lower() == "hold" and v:lower() == "user") then kept[#kept + 1] = trim(item) end
  end
  if #kept == 0 then
    local free = rest:sub(2)                      -- drop the ';'
    if free == "" and rest == "" then return "" end
    return free
  end
  return COMMENT_PREFIX .. table.concat(kept, ",") .. rest
end

-- ----------------------------------------------------------------------------------------------- hooks
function slurm_job_submit(job_desc, part_list, submit_uid)
  local cfg = config()
  if cfg.mode == "off" then return slurm.SUCCESS end

  -- Themis options are checked on every job that carries them, so a mistake is caught even when the job
  -- turns out not to be managed (they only take effect on managed jobs).
  local opts, err = job_options(job_desc, cfg)
  if err then
    slurm.log_user("%s", err)
    return slurm.ERROR
  end

  local parts = submit_partitions(job_desc, part_list)
  local managed = count_managed(cfg, parts)
  if managed == 0 or not job_asks_gpus(job_desc) then return slurm.SUCCESS end

  if managed < #parts then
    slurm.log_user("themis: a GPU job may not list Themis-managed and other partitions together (%s): " ..
                   "submit it to one partition", table.concat(parts, ","))
    return slurm.ERROR
  end
  local where = table.concat(parts, ",")
  local user_hold = job_desc.priority == 0   -- sbatch --hold, before this script holds the job itself

  if cfg.mode == "enforce" then
    -- First, before the batch check: slurmctld runs this hook once per component and only component 0
    -- carries the script, so a GPU component at offset 1+ would otherwise get the interactive message.
    if is_set_num(job_desc.het_job_offset, NO_VAL) then
      slurm.log_user("themis: heterogeneous jobs are not supported in partition %s: Themis schedules a " ..
                     "job's GPUs as one gang; submit the components as separate jobs", where)
      return slurm.ERROR
    end
    if job_desc.script == nil and not cfg.allow_interactive then
      slurm.log_user("themis: GPU jobs in partition %s must be batch jobs (sbatch): Themis takes GPUs back " ..
                     "by requeueing, which only works for batch jobs; use an unmanaged partition for " ..
                     "interactive work", where)
      return slurm.ERROR
    end
    if job_desc.requeue == 0 then
      slurm.log_user("themis: jobs in partition %s must be requeueable: drop --no-requeue (Themis " ..
                     "preempts by requeueing; see the user guide on checkpointing)", where)
      return slurm.ERROR
    end
    job_desc.requeue = 1
    if failing_open(cfg) then
      slurm.log_info("themis: FAIL-OPEN: themisd's heartbeat %s is missing or older than %d s: job of uid " ..
                     "%d in %s not held (Slurm schedules it; themisd adopts it when it is back)",
                     cfg.heartbeat_file, cfg.fail_open_after_s, submit_uid, where)
    else
      job_desc.priority = 0          -- held (Reason JobHeldUser) until themisd pins and releases it
    end
  end
  if cfg.mode == "enforce" and user_hold then
    -- `sbatch --hold`: the owner's hold, recorded as hold=user like a later `scontrol hold` (Themis's own
    -- hold hides it otherwise, and themisd would start the job)
    job_desc.comment = comment_with_user_hold(job_desc.comment)
  end
  job_desc.admin_comment = record(opts, array_throttle(job_desc.array_inx), job_desc.req_nodes)
  local what = "observed"
  if cfg.mode == "enforce" then what = job_desc.priority == 0 and "held" or "recorded, not held," end
  slurm.log_info("themis: %s job of uid %d in %s: %s", what, submit_uid, where, job_desc.admin_comment)
  return slurm.SUCCESS
end

-- ------------------------------------------------------------------------------- owner updates (modify)
-- Every field of job_desc that an update can carry and job_submit/lua lets this script read, with the value
-- it reads as when the update leaves it alone. Source: Slurm 22.05 job_submit_lua.c _get_job_req_field
-- (names) and api/init_msg.c slurm_init_job_desc_msg (defaults: NO_VAL* there, 0 / nil otherwise).
-- A name a Slurm release does not know reads as nil, i.e. "not set", so one list serves every release:
-- add the names a newer Slurm introduces (see the Slurm 25.11 notes in docs/design.md) below.
-- Kinds: "s" string (unset = nil), "n" number with default 0, or the NO_VAL constant it defaults to;
-- "bits" is bitflags, where slurmctld itself sets USE_DEFAULT_ACCT/PART/QOS/WCKEY (bits 25-28) on every
-- update: any other bit (e.g. RESET_ACCRUE_TIME, which resets the priority's age factor) counts as set.
local NO_VAL8 = slurm.NO_VAL8 or 254
local NO_VAL64 = slurm.NO_VAL64 or 18446744073709551614
local UPDATE_FIELDS = {
  account = "s", acctg_freq = "s", admin_comment = "s", array_inx = "s",
  batch_features = "s", begin_time = "n", bitflags = "bits", boards_per_node = "n", burst_buffer = "s",
  clusters = "s", comment = "s", container = "s", contiguous = NO_VAL16, cores_per_socket = NO_VAL16,
  cpu_freq_min = NO_VAL, cpu_freq_max = NO_VAL, cpu_freq_gov = NO_VAL, cpus_per_task = NO_VAL16,
  cpus_per_tres = "s", cron_job = "n", delay_boot = NO_VAL, dependency = "s", end_time = "n", extra = "s",
  exc_nodes = "s", features = "s", gres = "s", immediate = "n", licenses = "s",
  mail_type = NO_VAL16, mail_user = "s", max_cpus = NO_VAL, max_nodes = NO_VAL, mem_per_tres = "s",
  min_cpus = NO_VAL, min_mem_per_node = "s", min_mem_per_cpu = "s", min_nodes = NO_VAL, name = "s",
  network = "s", nice = NO_VAL, ntasks_per_board = "n", ntasks_per_core = NO_VAL16,
  ntasks_per_gpu = "n", ntasks_per_node = NO_VAL16, ntasks_per_socket = NO_VAL16,
  ntasks_per_tres = NO_VAL16, num_tasks = NO_VAL, pack_job_offset = "n", het_job_offset = "n",
  partition = "s", prefer = "s", power_flags = "n", pn_min_cpus = NO_VAL16, pn_min_memory = NO_VAL64,
  pn_min_tmp_disk = NO_VAL, priority = NO_VAL, qos = "s", reboot = NO_VAL16, req_context = "s",
  req_nodes = "s", req_switch = NO_VAL, requeue = NO_VAL16, reservation = "s", script = "s",
  shared = NO_VAL16, oversubscribe = NO_VAL16, site_factor = NO_VAL, sockets_per_board = "n",
  sockets_per_node = NO_VAL16, std_err = "s", std_in = "s", std_out = "s", threads_per_core = NO_VAL16,
  time_limit = NO_VAL, time_min = NO_VAL, tres_bind = "s", tres_freq = "s", tres_per_job = "s",
  tres_per_node = "s", tres_per_socket = "s", tres_per_task = "s", wait4switch = NO_VAL,
  work_dir = "s", wckey = "s",
  -- added by later releases (25.11 _get_job_req_field; scontrol update MCSLabel=, SegmentSize via -b):
  mcs_label = "s", segment_size = "n", selinux_context = "s",
}
-- Not listed, because slurmctld fills them in, not the update: alloc_node (the host the update came from),
-- user_id (the job's owner, filled in before this hook runs; checked separately: only another uid is
-- refused), group_id (25.11 sends SLURM_AUTH_NOBODY, 99; an update never applies it), user_name/default_*
-- (follow from it), assoc_comment/assoc_qos (25.11: looked up from the association); environment
-- is a proxy table, argc/argv/spank_job_env are not updatable.
-- (min_mem_per_node / min_mem_per_cpu are numbers when set; listed as "s" so that nil means unset.)

-- What an owner (not an operator) may set on a Themis-managed job. Nothing here can start, move, widen or
-- reprioritise the job: Comment (progress reports), Name, MailType/MailUser, and a TimeLimit no longer
-- than the current one. Hold/release by the owner (priority) is translated below, never passed through.
-- Everything else is refused, naming the field.
local MODIFY_CAN_TALK = slurm.STEPMGR_ENABLED ~= nil
local OWNER_MAY_SET = { comment = true, name = true, mail_type = true, mail_user = true, time_limit = true }

local UNSET_NUMBERS = { [NO_VAL] = true, [NO_VAL16] = true, [NO_VAL8] = true, [NO_VAL64] = true }

-- The fields an update sets, in a stable order (names as in UPDATE_FIELDS).
local function fields_set(job_desc)
  local out = {}
  for name, kind in pairs(UPDATE_FIELDS) do
    local v = job_desc[name]
    local set
    if type(v) == "boolean" then             -- e.g. cron_job, a view of bitflags
      set = v
    elseif kind == "s" then
      set = v ~= nil
    elseif v == nil or UNSET_NUMBERS[v] then
      set = false                           -- slurmctld unpacks some unset numbers as another NO_VAL*
    elseif kind == "n" then
      set = v ~= 0
    elseif kind == "bits" then
      set = v % 2 ^ 25 ~= 0 or math.floor(v / 2 ^ 29) ~= 0   -- Lua 5.1 has no bit operators
    else
      set = true
    end
    if set then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

-- Lua 5.3 prints whole floats as "38.0": Slurm hands numbers over as floats.
local function int_text(x)
  if type(x) == "number" then return string.format("%.0f", x) end
  return tostring(x)
end

local function refuse(code, what, job_rec, modify_uid)
  slurm.log_info("themis: refused %s of job %s by uid %d (Themis-managed)", what, int_text(job_rec.job_id),
                 modify_uid)
  -- 22.05 discards (and logs an error for) log_user() in this hook; 24.05+ (which export
  -- STEPMGR_ENABLED) show it to the user. Both get the error code.
  if MODIFY_CAN_TALK then
    slurm.log_user("themis: job %s is managed by Themis: %s is not allowed (see the user guide)",
                   int_text(job_rec.job_id), what)
  end
  return code
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local cfg = config()
  if cfg.mode ~= "enforce" or cfg.operator_uids[modify_uid] then return slurm.SUCCESS end

  local cur = split_commas(job_rec.partition)
  local new = split_commas(job_desc.partition)
  local in_managed = count_managed(cfg, cur) > 0
  local to_managed = count_managed(cfg, new) > 0
  if not in_managed and not to_managed then return slurm.SUCCESS end

  -- Partition changes into or out of a managed partition: a held job moved to an unmanaged partition would
  -- escape Themis; an unmanaged job moved into one would run without having been held.
  if #new > 0 and table.concat(new, ",") ~= table.concat(cur, ",") then
    return refuse(ESLURM_ACCESS_DENIED, "partition change to " .. table.concat(new, ","), job_rec, modify_uid)
  end

  -- Adding or changing a GPU request: a CPU job in a managed partition must not turn into an unheld GPU
  -- job, and a managed job's size is what Themis allocated.
  for _, f in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task", "gres" }) do
    if job_desc[f] ~= nil then return refuse(ESLURM_ACCESS_DENIED, f .. " change", job_rec, modify_uid) end
  end

  local managed = (job_rec.admin_comment or ""):sub(1, #RECORD_PREFIX) == RECORD_PREFIX
  if not managed then return slurm.SUCCESS end

  -- Deny by default: every field the update sets must be on the owner's allowlist.
  -- slurmctld fills in the owner before this hook: only a different one counts.
  if job_desc.user_id ~= nil and job_desc.user_id ~= NO_VAL and job_desc.user_id ~= job_rec.user_id then
    return refuse(ESLURM_ACCESS_DENIED, "user_id change", job_rec, modify_uid)
  end
  local hold, release = false, false
  for _, f in ipairs(fields_set(job_desc)) do
    if f == "priority" then
      -- scontrol hold/uhold = 0, release = INFINITE, top/Priority= a number: the start of a managed job
      -- belongs to themisd. The owner's hold and release only toggle hold=user (see above).
      if job_desc.priority == 0 then
        hold = true
      elseif job_desc.priority == INFINITE then
        release = true
      else
        return refuse(ESLURM_JOB_HELD, "priority change", job_rec, modify_uid)
      end
    elseif f == "time_limit" then
      -- The time limit may feed the estimate Themis fixed at submit: only shortening is allowed.
      local old = job_rec.time_limit
      local want = job_desc.time_limit
      if want == INFINITE or (old ~= nil and old ~= INFINITE and old ~= NO_VAL and want > old) then
        return refuse(ESLURM_ACCESS_DENIED, string.format("raising TimeLimit (%s -> %s minutes)",
                      int_text(old), want == INFINITE and "UNLIMITED" or int_text(want)), job_rec, modify_uid)
      end
    elseif not OWNER_MAY_SET[f] then
      return refuse(ESLURM_ACCESS_DENIED, string.format("%s change (to %s)", f, shown(int_text(job_desc[f]))),
                    job_rec, modify_uid)
    end
  end
  if hold or release then
    local comment = job_desc.comment or job_rec.comment
    if release and not comment_has_user_hold(comment) then
      return refuse(ESLURM_JOB_HELD, "release", job_rec, modify_uid)
    end
    job_desc.priority = NO_VAL       -- Themis's hold stays exactly as it is
    job_desc.comment = hold and comment_with_user_hold(comment) or comment_without_user_hold(comment)
    slurm.log_info("themis: job %s: owner uid %d %s (Comment now %q)", int_text(job_rec.job_id), modify_uid,
                   hold and "holds it: hold=user" or "releases its own hold", job_desc.comment)
  end
  return slurm.SUCCESS
end

-- Load the config once when slurmctld (re)loads the script, so errors show up in its log right away.
config()
return slurm.SUCCESS
