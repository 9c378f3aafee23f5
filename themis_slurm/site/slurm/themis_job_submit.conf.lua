-- themis_job_submit.conf.lua - configuration of job_submit.lua (themis-slurm).
--
-- Install it NEXT TO job_submit.lua (which itself sits next to slurm.conf, usually /etc/slurm/).
-- It is plain data: the file is run in an empty sandbox (no functions, no io, no os) and must return a
-- table. Unknown keys and bad values are reported in slurmctld's log and replaced by the defaults below,
-- so a typo never stops job submission.
--
-- slurmctld re-reads this file at most every `reload_seconds` seconds (and whenever job_submit.lua itself
-- changes: `touch /etc/slurm/job_submit.lua` applies a change at once).
return {
  -- Partitions whose GPU jobs Themis schedules. A GPU job (any --gres=gpu, --gpus, --gpus-per-node,
  -- --gpus-per-task, --gpus-per-socket request) submitted to one of these (or to the default partition
  -- when that is one of these) is "managed". Jobs without GPUs in these partitions are left to Slurm.
  managed_partitions = { "gpu" },

  -- "enforce": managed jobs are held at submit (priority 0) until the Themis daemon pins and releases them;
  --            their owners may not release them, change their partition, node list or GPU request.
  -- "observe": managed jobs are NOT held (Slurm schedules them as usual) but still get the admin_comment
  --            record, so the daemon can run in observe/advise mode and report what it would do.
  -- "off":     kill switch: job_submit.lua does nothing at all (no checks, no records, no holds).
  mode = "enforce",

  -- Who may release, pin (ReqNodeList), requeue or otherwise change managed jobs, besides root and the
  -- SlurmUser of slurm.conf (always allowed). User names (looked up in /etc/passwd when this file is read)
  -- or numeric uids (use uids for users that exist only in LDAP/SSSD). The daemon's account belongs here;
  -- also give it Slurm operator rights:  sacctmgr modify user themis set AdminLevel=Operator
  operators = { "themis" },

  -- salloc/srun GPU jobs in a managed partition: Themis takes GPUs back by requeueing the job, which only
  -- works for batch jobs, so interactive GPU jobs are refused there by default (send them to an
  -- unmanaged partition instead). Set true to accept them (they are held and released like batch jobs).
  allow_interactive = false,

  -- Seconds between re-reads of this file by slurmctld.
  reload_seconds = 60,

  -- Fail-open: themisd rewrites heartbeat_file after every cycle (themis.yaml failopen.heartbeat_file:
  -- the same path; it must be readable here, i.e. on the slurmctld host). Once it is missing or older than
  -- fail_open_after_s seconds, themisd is taken to be gone and new managed jobs are NOT held, so nothing
  -- waits forever; themisd-failopen.timer releases those held before (docs/admin-guide.md, "Fail-open").
  -- 0 turns fail-open off: managed jobs then wait for themisd however long it is away (also the value
  -- when this key is missing, as in configs from before fail-open). A fresh heartbeat is re-read at most
  -- every 5 s.
  heartbeat_file = "/run/themis/heartbeat",
  fail_open_after_s = 600,

  -- The site's own model classes: the names themis.yaml's `models:` section defines (not the ones it only
  -- overrides: built-in names are always accepted). --themis-model and model= in --comment accept these
  -- besides the built-in models, and list them when they refuse a name. Keep this list, themis.yaml and the
  -- SPANK plugin's `models=` argument in plugstack.conf the same: `themis config check` says when they are
  -- not (docs/admin-guide.md, "Model classes"). Names: 1 to 32 lower-case letters, digits, '-', '_' or '.'.
  extra_models = {},
}
