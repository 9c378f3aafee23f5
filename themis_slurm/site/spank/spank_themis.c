/*
 * spank_themis.c - the Themis job options for sbatch, salloc and srun (a Slurm SPANK plugin).
 *
 *   sbatch -p gpu --gres=gpu:4 --themis-app=bert --themis-model=resnet50 --themis-est=6h train.sh
 *
 * Adds --themis-app, --themis-model, --themis-sens and --themis-est (command line, #SBATCH lines, and the
 * environment variables SBATCH_THEMIS_<KEY> for sbatch, SALLOC_THEMIS_<KEY> for salloc and
 * SLURM_THEMIS_<KEY> for srun, which the command line and #SBATCH lines override). A bad value is refused
 * here, at the client, before anything is submitted, with a message that names the option, the value and
 * what is accepted. Good values travel to slurmctld in the job's spank_job_env as one entry
 *
 *   THEMIS_OPTIONS=app=bert,model=resnet50,est=6h     (the --comment=themis: grammar)
 *
 * where job_submit.lua checks them again and writes the trusted AdminComment record: a user can always run
 * a client without this plugin, so the server is the authority and this plugin only gives early, friendly
 * errors and proper option syntax. Nothing runs in the remote (slurmstepd), slurmd or prolog contexts
 * beyond registering the options, so the plugin is harmless on compute nodes.
 *
 * Build: make -C spank (see the Makefile); install with a plugstack.conf line such as
 *   required /usr/local/lib/slurm/spank_themis.so
 * and, where the site defines model classes of its own in themis.yaml, name them after it:
 *   required /usr/local/lib/slurm/spank_themis.so models=llama-70b,mixtral-8x22b
 * ("required": Slurm ignores what an optional plugin's slurm_spank_init_post_opt returns, and that is where
 * bad environment values and --themis-model with --themis-sens are refused.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "themis_grammar.h"
#include "themis_options.h"

SPANK_PLUGIN(themis, 1);

#define MAX_VALUE 256

static char values[THEMIS_N_OPTIONS][MAX_VALUE];    /* the checked values; "" = not given */
static int given[THEMIS_N_OPTIONS];
static char names[THEMIS_N_OPTIONS][32];              /* "themis-app", ... */
static struct spank_option opts[THEMIS_N_OPTIONS];    /* Slurm copies them, but keep them static anyway */

static int store(int index, const char *raw, const char *source)
{
    char value[MAX_VALUE], err[2048];   /* room for every model of the refusal's list */
    if (themis_trim(raw ? raw : "", value, sizeof(value)) != 0) {
        slurm_error("themis: invalid option --themis-%s%s%s: the value is longer than %d characters",
                    themis_options[index].key, source ? " " : "", source ? source : "", MAX_VALUE - 1);
        return -1;
    }
    if (themis_check_value(index, value, source, err, sizeof(err)) != 0) {
        slurm_error("%s", err);
        return -1;
    }
    memcpy(values[index], value, sizeof(value));
    given[index] = 1;
    return 0;
}

/* Option callback: VAL is the index into themis_options[]. Called for each use (an #SBATCH line, then the
 * command line), so the last one wins, as for Slurm's own options. */
static int option_cb(int val, const char *optarg, int remote)
{
    if (remote)
        return 0;   /* slurmstepd: the value was checked at the client and again by slurmctld */
    if (val < 0 || val >= THEMIS_N_OPTIONS)
        return -1;
    return store(val, optarg, NULL);
}

static int client_context(void)
{
    spank_context_t ctx = spank_context();
    return ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL;
}

/* The plugstack.conf arguments: models=a,b,c names the site's own model classes (themis.yaml models:), which
 * --themis-model then accepts besides the built-in ones. Read at the client only: in slurmstepd the value
 * was checked already. A bad argument is reported (naming it) and left out, never fatal: one typo in
 * plugstack.conf must not stop every sbatch, salloc and srun of the cluster. Without a valid list the
 * plugin accepts the built-in classes only; job_submit.lua still checks every job against its own list. */
static void read_arguments(int ac, char **av)
{
    char err[2048];
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "models=", 7) == 0) {
            if (themis_set_site_models(av[i] + 7, err, sizeof(err)) != 0)
                slurm_error("%s (ignored: --themis-model takes the built-in classes only; ask your admins "
                            "to fix plugstack.conf)", err);
        } else {
            slurm_error("themis: plugstack.conf: unknown argument '%s' to spank_themis.so ignored (accepted: "
                        "models=NAME[,NAME...], the site's own model classes)", av[i]);
        }
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
        return 0;
    if (ctx != S_CTX_REMOTE)
        read_arguments(ac, av);
    for (int i = 0; i < THEMIS_N_OPTIONS; i++) {
        snprintf(names[i], sizeof(names[i]), "themis-%s", themis_options[i].key);
        opts[i].name = names[i];
        opts[i].arginfo = (char *)themis_options[i].arginfo;
        opts[i].usage = (char *)themis_options[i].usage;
        opts[i].has_arg = 1;
        opts[i].val = i;
        opts[i].cb = option_cb;
        if (spank_option_register(sp, &opts[i]) != ESPANK_SUCCESS) {
            slurm_error("themis: cannot register option --%s", names[i]);
            return -1;
        }
    }
    return 0;
}

/* SBATCH for sbatch, SALLOC for salloc, SLURM for srun: the prefixes of each client's own input variables. */
static const char *env_prefix(void)
{
    if (spank_context() == S_CTX_LOCAL)
        return "SLURM";
    if (strcmp(program_invocation_short_name, "salloc") == 0)
        return "SALLOC";
    return "SBATCH";
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    char joined[THEMIS_N_OPTIONS * (MAX_VALUE + 16)];
    size_t len = 0;
    int a, b, any = 0;
    spank_err_t rc;
    (void)ac;
    (void)av;
    if (!client_context())
        return 0;

    /* Environment variables fill in what the command line and #SBATCH lines did not give. */
    for (int i = 0; i < THEMIS_N_OPTIONS; i++) {
        char var[64], upper[16], source[96];
        const char *v;
        size_t k;
        if (given[i])
            continue;
        for (k = 0; themis_options[i].key[k] && k < sizeof(upper) - 1; k++)
            upper[k] = (char)(themis_options[i].key[k] - ('a' <= themis_options[i].key[k] &&
                                                          themis_options[i].key[k] <= 'z' ? 32 : 0));
        upper[k] = '\0';
        snprintf(var, sizeof(var), "%s_THEMIS_%s", env_prefix(), upper);
        v = getenv(var);
        if (v == NULL)
            continue;
        snprintf(source, sizeof(source), "(from %s)", var);
        if (store(i, v, source) != 0)
            return -1;
    }

    a = themis_option_index(THEMIS_EXCLUSIVE_A);
    b = themis_option_index(THEMIS_EXCLUSIVE_B);
    if (given[a] && given[b]) {
        slurm_error("themis: options --themis-%s and --themis-%s are mutually exclusive: give a model or a "
                    "sensitivity class, not both", THEMIS_EXCLUSIVE_A, THEMIS_EXCLUSIVE_B);
        return -1;
    }

    joined[0] = '\0';
    for (int i = 0; i < THEMIS_N_OPTIONS; i++) {
        int n;
        if (!given[i])
            continue;
        n = snprintf(joined + len, sizeof(joined) - len, "%s%s=%s", any ? "," : "", themis_options[i].key,
                     values[i]);
        if (n < 0 || (size_t)n >= sizeof(joined) - len)
            return -1;   /* cannot happen: joined has room for every value */
        len += (size_t)n;
        any = 1;
    }
    if (!any)
        return 0;
    rc = spank_job_control_setenv(sp, THEMIS_SPANK_ENV, joined, 1);
    if (rc != ESPANK_SUCCESS) {
        slurm_error("themis: cannot pass the Themis options to Slurm: %s", spank_strerror(rc));
        return -1;
    }
    return 0;
}
