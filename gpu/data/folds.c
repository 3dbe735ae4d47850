/*
 * folds.c — anchored walk-forward folds: the bars past the warmup split
 * into K+1 equal blocks; fold k trains on blocks 0..k and evaluates on block
 * k+1, its first half validation and its second half test.
 */
#include "common/error.h"
#include "gpu/data.h"

int
fox_fold_split(int n, int warmup, int n_folds, int k, fox_fold *out)
{
    if (!out || n_folds < 1 || k < 0 || k >= n_folds || warmup < 0 || n <= warmup)
        return FOX_EINVAL;
    int usable = n - warmup;
    int len = usable / (n_folds + 1);
    if (len < 100)
        return FOX_EINVAL;
    /*
     * Block b is [warmup + b·len, warmup + (b+1)·len); the remainder, fewer
     * than K+1 bars, joins the last block so that no bar is dropped.
     */
    int eval_begin = warmup + (k + 1) * len;
    int eval_end = k + 1 == n_folds ? n : eval_begin + len;
    int mid = eval_begin + len / 2;
    out->train_begin = warmup;
    out->train_end = eval_begin;
    out->val_begin = eval_begin;
    out->val_end = mid;
    out->test_begin = mid;
    out->test_end = eval_end;
    return FOX_OK;
}
