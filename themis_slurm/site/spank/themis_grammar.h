/* themis_grammar.h - generated from themis_slurm/slurm/option_grammar.py (python -m themis_slurm.slurm.option_grammar --write): do not edit. */
#ifndef THEMIS_GRAMMAR_H
#define THEMIS_GRAMMAR_H

#define THEMIS_APP_MAX_LEN 64
#define THEMIS_APP_PUNCT "_.-"
#define THEMIS_EST_MAX_S 31536000L
#define THEMIS_SPANK_ENV "THEMIS_OPTIONS"
#define THEMIS_MODEL_NAME_MAX_LEN 32
#define THEMIS_MODEL_NAME_PUNCT "-_."
#define THEMIS_MODEL_NAME_EXPECTED "a name of 1 to 32 lower-case letters, digits, '-', '_' or '.' starting with a letter or digit"

struct themis_option {
    const char *key;      /* --comment key; the option is --themis-<key> */
    const char *arginfo;
    const char *usage;
    const char *expected;
};

static const struct themis_option themis_options[] = {
    {"app", "name",
     "Themis app: groups your jobs into one app for fairness (default: the job, or the array)",
     "a name of 1 to 64 letters, digits, '_', '.' or '-' starting with a letter or digit"},
    {"model", "model",
     "Themis model class: the placement profile of the job's model, e.g. transformer-dp (not with --themis-sens)",
     "one of vgg11, vgg16, vgg19, alexnet, resnet50, resnet101, resnet152, inception3, inception4, googlenet, transformer-dp, transformer-tp, moe, finetune"},
    {"sens", "class",
     "Themis placement sensitivity: high, medium, low or none (not with --themis-model)",
     "one of high, medium, low, none"},
    {"est", "duration",
     "Themis estimate of the run time on the GPUs requested, e.g. 6h, 90m, 1-12:00:00 (default: the time limit)",
     "a duration above 0 and at most 365 days such as 90m, 6h, 1h30m, 2d, 1-12:00:00"},
    {"ckpt", "when",
     "Themis: when the job saves its state: yes (at Themis's warning, the default), no (never: a preemption loses its whole run) or how often, e.g. 30m",
     "yes, no, or how often it saves: a duration above 0 and at most 365 days such as 30m, 2h"},
};
#define THEMIS_N_OPTIONS 5

static const char *const themis_models[] = {"vgg11", "vgg16", "vgg19", "alexnet", "resnet50", "resnet101", "resnet152", "inception3", "inception4", "googlenet", "transformer-dp", "transformer-tp", "moe", "finetune", 0};
static const char *const themis_sens[] = {"high", "medium", "low", "none", 0};
static const char *const themis_ckpt_words[] = {"yes", "no", 0};
#define THEMIS_EXCLUSIVE_A "model"
#define THEMIS_EXCLUSIVE_B "sens"

#endif
