/*
 * error_test.c — the status codes on their own: every code has a text and a
 * name, both generated from FOX_ERR_MAP and distinct from every other code's;
 * codes outside the table read as unknown; fox_errf formats into a bounded
 * buffer and returns the code it was given.
 *
 * Plain Check with its own main(): common/ depends on nothing of the project,
 * and neither does its test.
 */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

START_TEST(error_every_code_has_its_table_text)
{
    int seen = 0;
#define X(n, s)                                                                                    \
    ck_assert_str_eq(fox_strerror(FOX_##n), s);                                                    \
    ck_assert_str_eq(fox_err_name(FOX_##n), #n);                                                   \
    seen++;
    FOX_ERR_MAP(X)
#undef X
    /* The enum counts the table's codes after FOX_OK, so no code is left without a string. */
    ck_assert_int_eq(seen, FOX_ERR_COUNT - 1);
    ck_assert_str_eq(fox_strerror(FOX_OK), "success");
    ck_assert_str_eq(fox_err_name(FOX_OK), "OK");
}
END_TEST

START_TEST(error_texts_and_names_are_distinct)
{
    for (int a = 0; a < FOX_ERR_COUNT; a++) {
        const char *text = fox_strerror(a), *name = fox_err_name(a);
        ck_assert_msg(text && text[0], "code %d has no text", a);
        ck_assert_msg(name && name[0], "code %d has no name", a);
        ck_assert_msg(strcmp(text, "unknown error code") != 0, "code %d reads as unknown", a);
        if (a > 0)
            ck_assert_msg(name[0] == 'E', "code %d is named %s, not E*", a, name);
        for (int b = a + 1; b < FOX_ERR_COUNT; b++) {
            ck_assert_msg(strcmp(text, fox_strerror(b)) != 0, "codes %d and %d share '%s'", a, b,
                          text);
            ck_assert_msg(strcmp(name, fox_err_name(b)) != 0, "codes %d and %d share %s", a, b,
                          name);
        }
    }
}
END_TEST

START_TEST(error_unknown_codes)
{
    static const int outside[] = {-1, FOX_ERR_COUNT, FOX_ERR_COUNT + 1, INT_MAX, INT_MIN};
    for (size_t k = 0; k < sizeof outside / sizeof outside[0]; k++) {
        ck_assert_str_eq(fox_strerror(outside[k]), "unknown error code");
        ck_assert_str_eq(fox_err_name(outside[k]), "E?");
    }
}
END_TEST

START_TEST(error_errf_formats_and_returns_the_code)
{
    char err[32];
    ck_assert_int_eq(fox_errf(err, sizeof err, FOX_EINVAL, "%s: %d", "train.batch", 12),
                     FOX_EINVAL);
    ck_assert_str_eq(err, "train.batch: 12");
    /* Cut to the buffer, always terminated. */
    ck_assert_int_eq(fox_errf(err, 8, FOX_EIO, "%s", "a much longer message"), FOX_EIO);
    ck_assert_str_eq(err, "a much ");
    /* No buffer, or no room: only the code comes back, and nothing is written. */
    ck_assert_int_eq(fox_errf(NULL, 0, FOX_ENOMEM, "%s", "ignored"), FOX_ENOMEM);
    strcpy(err, "kept");
    ck_assert_int_eq(fox_errf(err, 0, FOX_ESTATE, "%s", "ignored"), FOX_ESTATE);
    ck_assert_str_eq(err, "kept");
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("codes");
    tcase_add_test(tc, error_every_code_has_its_table_text);
    tcase_add_test(tc, error_texts_and_names_are_distinct);
    tcase_add_test(tc, error_unknown_codes);
    tcase_add_test(tc, error_errf_formats_and_returns_the_code);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
