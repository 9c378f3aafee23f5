/*
 * check_options.c - runs the plugin's value checks from the command line, for the tests.
 *
 *   check_options [--models=a,b] KEY VALUE
 *       prints "ok <seconds>" (est), "ok" (other keys), or the error; exit 0 or 1 (2: bad --models=)
 *
 * It links the same themis_options.c as the plugin, so tests/unit/slurm/test_option_grammar.py can run the
 * shared case table against the plugin's checks without a Slurm client. --models= is the plugin's
 * plugstack.conf argument models= (the site's own model classes).
 */
#include <stdio.h>
#include <string.h>

#include "themis_options.h"

int main(int argc, char **argv)
{
    char err[2048], value[4096];
    int index;
    long s;
    if (argc == 4 && strncmp(argv[1], "--models=", 9) == 0) {
        if (themis_set_site_models(argv[1] + 9, err, sizeof(err)) != 0) {
            printf("%s\n", err);
            return 2;
        }
        argv++;
        argc--;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: check_options [--models=a,b] KEY VALUE\n");
        return 2;
    }
    index = themis_option_index(argv[1]);
    if (index < 0) {
        printf("unknown key %s\n", argv[1]);
        return 1;
    }
    if (themis_trim(argv[2], value, sizeof(value)) != 0) {
        printf("too long\n");
        return 1;
    }
    if (themis_check_value(index, value, NULL, err, sizeof(err)) != 0) {
        printf("%s\n", err);
        return 1;
    }
    if (argv[1][0] == 'e' && themis_parse_duration(value, &s) == 0)
        printf("ok %ld\n", s);
    else
        printf("ok\n");
    return 0;
}
