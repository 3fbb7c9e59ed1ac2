/* A program built against an installed libferry (tests/python/test_c_install.py): only the
 * public header, found through pkg-config or find_package(ferry). Usage: consumer MODEL OUT.
 * Opens the checkpoint MODEL, exports it to ONNX in OUT, and prints the library's version and
 * one line "component NAME FILE" per component. Exit 0 on success, 1 on any failure. */
#include <ferry.h>

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL OUT\n", argv[0]);
        return 2;
    }
    int rc = 1;
    ferry_model *model = NULL;
    ferry_exported *exported = NULL;
    char buf[512];

    ferry_status st = ferry_model_open(argv[1], NULL, &model);
    if (st != FERRY_OK) {
        fprintf(stderr, "open: %s: %s\n", ferry_status_str(st),
                model ? ferry_model_errmsg(model) : "out of memory");
        goto done;
    }
    ferry_export_config cfg;
    ferry_export_config_init(&cfg);
    cfg.format = FERRY_FORMAT_ONNX;
    cfg.dynamic = 1;
    st = ferry_export(model, &cfg, &exported);
    if (st != FERRY_OK) {
        fprintf(stderr, "export: %s: %s\n", ferry_status_str(st), ferry_model_errmsg(model));
        goto done;
    }
    st = ferry_exported_save(exported, argv[2], 0);
    if (st != FERRY_OK) {
        fprintf(stderr, "save: %s: %s\n", ferry_status_str(st), ferry_exported_errmsg(exported));
        goto done;
    }
    printf("version %s\n", ferry_version());
    printf("architecture %s\n", ferry_escape(ferry_model_architecture(model), buf, sizeof buf));
    int n = ferry_exported_component_count(exported);
    for (int i = 0; i < n; i++) {
        printf("component %s", ferry_escape(ferry_exported_component_name(exported, i), buf,
                                            sizeof buf));
        printf(" %s\n", ferry_escape(ferry_exported_component_file(exported, i), buf, sizeof buf));
    }
    rc = n > 0 ? 0 : 1;
done:
    ferry_exported_free(exported);
    ferry_model_free(model);
    return rc;
}
