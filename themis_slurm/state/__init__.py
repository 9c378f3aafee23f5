"""themisd's state: what it stores, how it is read and written, and what it means.

Below both the daemon (the only writer) and the status API and CLI (readers), so that the two read the
same typed rows and apply the same rules:

    schema.py       the tables and their migrations
    rows.py         typed rows of every table, and their SQL form
    intents.py      a job's Themis intent and its named subsets (held for granted, moving, transitional)
    store.py        the read-write database (themisd); opening.py opens it without ever starting silently
                    on empty or damaged state; disk.py keeps its files private and names a failing disk
    reader.py       the read-only view (the status API, `themis`)
    errors.py       why the state cannot be used, in one line naming the file and the way out
    record.py       one round's Decision into the audit log, in one transaction
    held.py         the GPUs held for granted jobs Slurm does not run yet
    jobs.py         the core's Job of a managed job and its row
    round_input.py  the core's ClusterState from the rows and a snapshot (themisd's round, the API's estimates)
    finish.py       each app's T_id and T_sh now (the status API)
"""
