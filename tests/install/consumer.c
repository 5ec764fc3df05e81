/* A program built against an installed Ember: checks the ABI and the version. */
#include <stdio.h>

#include <ember.h>

int main(void) {
    if (EMBER_CHECK_ABI() != EMBER_OK) {
        fprintf(stderr, "%s\n", ember_last_error());
        return 1;
    }
    if (ember_version_number() != EMBER_VERSION_NUMBER) return 2;
    ember_model_params mp = ember_model_default_params();
    return mp.struct_size == sizeof(mp) ? 0 : 3;
}
