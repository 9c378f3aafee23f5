/*
 * themis_options.c - value checks for the Themis job options; see themis_options.h.
 *
 * The duration grammar mirrors parse_duration in job_submit.lua (the server's check, which is the
 * authority); tests/unit/slurm/test_option_grammar.py runs one case table against both.
 */
#include "themis_options.h"
#include "themis_grammar.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int themis_option_index(const char *key)
{
    for (int i = 0; i < THEMIS_N_OPTIONS; i++)
        if (key && strcmp(key, themis_options[i].key) == 0)
            return i;
    return -1;
}

int themis_trim(const char *value, char *out, size_t outlen)
{
    size_t n;
    while (*value == ' ' || *value == '\t')
        value++;
    n = strlen(value);
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    if (n >= outlen)
        return -1;
    memcpy(out, value, n);
    out[n] = '\0';
    return 0;
}

/* Digits at *p: at most MAXDIGITS of them, at least one. Advances *p. */
static int take_number(const char **p, int maxdigits, long *out)
{
    long n = 0;
    int digits = 0;
    while (isdigit((unsigned char)**p)) {
        if (++digits > maxdigits)
            return -1;
        n = n * 10 + (**p - '0');
        (*p)++;
    }
    if (digits == 0)
        return -1;
    *out = n;
    return 0;
}

/* [D-]HH:MM:SS, minutes and seconds as two digits below 60 (days at most 3 digits, hours at most 4). */
static int parse_clock(const char *v, long *seconds)
{
    const char *p = v;
    long d = 0, h, m, s;
    if (strchr(v, '-')) {
        if (take_number(&p, 3, &d) || *p++ != '-')
            return -1;
    }
    if (take_number(&p, 4, &h) || *p++ != ':')
        return -1;
    if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]) || p[2] != ':')
        return -1;
    m = (p[0] - '0') * 10 + (p[1] - '0');
    p += 3;
    if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]) || p[2] != '\0')
        return -1;
    s = (p[0] - '0') * 10 + (p[1] - '0');
    if (m >= 60 || s >= 60)
        return -1;
    *seconds = d * 86400 + h * 3600 + m * 60 + s;
    return 0;
}

int themis_parse_duration(const char *value, long *seconds)
{
    static const char units[] = "dhms";
    static const long unit_s[] = {86400, 3600, 60, 1};
    const char *p = value;
    long total = 0;
    int last = -1;

    if (value == NULL || *value == '\0')
        return -1;
    if (strchr(value, ':'))
        return parse_clock(value, seconds);
    while (*p) {
        long n;
        const char *u;
        if (take_number(&p, 9, &n))
            return -1;
        u = *p ? strchr(units, tolower((unsigned char)*p)) : NULL;
        if (u == NULL || (int)(u - units) <= last)
            return -1;   /* no unit, an unknown one, or units out of order or repeated */
        last = (int)(u - units);
        total += n * unit_s[last];
        p++;
    }
    *seconds = total;
    return 0;
}

static int in_list(const char *const *list, const char *value)
{
    for (; *list; list++)
        if (strcasecmp(*list, value) == 0)
            return 1;
    return 0;
}

/* The site's own model classes (themis_set_site_models), and ", a, b" for the refusal message. */
static char site_models[THEMIS_MAX_SITE_MODELS][THEMIS_MODEL_NAME_MAX_LEN + 1];
static int n_site_models;
static char site_models_text[THEMIS_MAX_SITE_MODELS * (THEMIS_MODEL_NAME_MAX_LEN + 2) + 1];

static int in_site_models(const char *value)
{
    for (int i = 0; i < n_site_models; i++)
        if (strcasecmp(site_models[i], value) == 0)
            return 1;
    return 0;
}

int themis_valid_model_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > THEMIS_MODEL_NAME_MAX_LEN)
        return 0;
    if (!(islower((unsigned char)name[0]) || isdigit((unsigned char)name[0])))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(c < 0x80 && (islower(c) || isdigit(c))) && !strchr(THEMIS_MODEL_NAME_PUNCT, c))
            return 0;
    }
    return 1;
}

int themis_set_site_models(const char *list, char *err, size_t errlen)
{
    char names[THEMIS_MAX_SITE_MODELS][THEMIS_MODEL_NAME_MAX_LEN + 1];
    int n = 0;
    const char *p = list ? list : "";

    n_site_models = 0;
    site_models_text[0] = '\0';
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[THEMIS_MODEL_NAME_MAX_LEN + 1];
        int seen = 0;
        if (len == 0 || len > THEMIS_MODEL_NAME_MAX_LEN) {
            snprintf(err, errlen, "themis: plugstack.conf: models=%s: '%.*s' is not %s", list,
                     (int)(len > 40 ? 40 : len), p, THEMIS_MODEL_NAME_EXPECTED);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (!themis_valid_model_name(name)) {
            snprintf(err, errlen, "themis: plugstack.conf: models=%s: '%s' is not %s", list, name,
                     THEMIS_MODEL_NAME_EXPECTED);
            return -1;
        }
        if (in_list(themis_sens, name)) {
            snprintf(err, errlen, "themis: plugstack.conf: models=%s: '%s' is a sensitivity class "
                     "(--themis-sens), not a model", list, name);
            return -1;
        }
        for (int i = 0; i < n; i++)
            seen |= strcmp(names[i], name) == 0;
        if (!seen && !in_list(themis_models, name)) {
            if (n == THEMIS_MAX_SITE_MODELS) {
                snprintf(err, errlen, "themis: plugstack.conf: models=%s: more than %d classes", list,
                         THEMIS_MAX_SITE_MODELS);
                return -1;
            }
            memcpy(names[n++], name, len + 1);
        }
        p += len + (end ? 1 : 0);
    }
    for (int i = 0; i < n; i++) {
        memcpy(site_models[i], names[i], sizeof(names[i]));
        strcat(site_models_text, ", ");
        strcat(site_models_text, names[i]);
    }
    n_site_models = n;
    return 0;
}

static int valid_app(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > THEMIS_APP_MAX_LEN || !isalnum((unsigned char)v[0]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr(THEMIS_APP_PUNCT, v[i]))
            return 0;
    return 1;
}

int themis_check_value(int index, const char *value, const char *source, char *err, size_t errlen)
{
    const struct themis_option *o;
    const char *key;
    int ok;

    if (index < 0 || index >= THEMIS_N_OPTIONS) {
        snprintf(err, errlen, "themis: unknown option");
        return -1;
    }
    o = &themis_options[index];
    key = o->key;
    if (value == NULL)
        value = "";
    if (strcmp(key, "app") == 0) {
        ok = valid_app(value);
    } else if (strcmp(key, "model") == 0) {
        ok = in_list(themis_models, value) || in_site_models(value);
    } else if (strcmp(key, "sens") == 0) {
        ok = in_list(themis_sens, value);
    } else if (strcmp(key, "ckpt") == 0 && in_list(themis_ckpt_words, value)) {
        ok = 1;
    } else {   /* est, or ckpt's interval */
        long s;
        ok = themis_parse_duration(value, &s) == 0 && s > 0 && s <= THEMIS_EST_MAX_S;
    }
    if (ok)
        return 0;
    /* Values echoed back are shortened (as in job_submit.lua) and control characters shown as '?': a
     * message must stay one readable line. */
    {
        char shown[41];
        size_t n = strlen(value), k;
        int cut = n > 40;
        if (cut)
            n = 37;
        for (k = 0; k < n; k++)
            shown[k] = (unsigned char)value[k] < 0x20 || value[k] == 0x7f ? '?' : value[k];
        shown[k] = '\0';
        snprintf(err, errlen, "themis: invalid option --themis-%s=%s%s%s%s: expected %s%s", key, shown,
                 cut ? "..." : "", source ? " " : "", source ? source : "", o->expected,
                 strcmp(key, "model") == 0 ? site_models_text : "");
    }
    return -1;
}
