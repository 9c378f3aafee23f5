/*
 * themis_options.h - checks the values of the Themis job options (--themis-app, -model, -sens, -est).
 *
 * Pure C, no Slurm: the SPANK plugin (spank_themis.c) and the test tool (check_options.c) share it. The
 * tables and messages come from themis_grammar.h, generated from themis_slurm/slurm/option_grammar.py,
 * the grammar's one definition; job_submit.lua checks the same grammar again in slurmctld.
 */
#ifndef THEMIS_OPTIONS_H
#define THEMIS_OPTIONS_H

#include <stddef.h>

/* Index of KEY ("app", "model", "sens", "est") in themis_options[], or -1. */
int themis_option_index(const char *key);

/* Copies VALUE without surrounding blanks into OUT (the server ignores them too). -1 when too long. */
int themis_trim(const char *value, char *out, size_t outlen);

/* Seconds of a duration (90s, 45m, 6h, 2d, 1h30m, [D-]HH:MM:SS; case-insensitive) into *seconds.
 * Returns 0, or -1 when VALUE is not a duration. Range checks are the caller's. */
int themis_parse_duration(const char *value, long *seconds);

/* The most model classes of a site's own (plugstack.conf models=) the plugin takes. */
#define THEMIS_MAX_SITE_MODELS 32

/* 1 when NAME follows the rule for a site's class names (THEMIS_MODEL_NAME_EXPECTED), else 0. */
int themis_valid_model_name(const char *name);

/* Sets the site's own model classes from LIST ("a,b,c": the plugstack.conf argument models=a,b,c), which
 * --themis-model then accepts besides the built-in models. Returns 0, or -1 with a message in ERR naming the
 * bad name (and then accepts none of them). Names already built in are accepted and not repeated. */
int themis_set_site_models(const char *list, char *err, size_t errlen);

/* Checks VALUE for the option at INDEX. Returns 0 when it is accepted, else -1 with a message for the
 * user in ERR ("themis: invalid option --themis-est=abc: expected ..."); SOURCE names where the value
 * came from when it is not the option itself (e.g. "from SBATCH_THEMIS_EST"), or is NULL. */
int themis_check_value(int index, const char *value, const char *source, char *err, size_t errlen);

#endif
