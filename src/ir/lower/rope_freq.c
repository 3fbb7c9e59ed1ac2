/* rope_freq.c — inverse-frequency tables for default, linear, dynamic, llama3, yarn and longrope
 * rotary embeddings, following transformers' formulas and its float32 rounding points. */
#include "ir/lower/rope_freq.h"

#include <math.h>

static float default_inv(double theta, int64_t i, int64_t dim)
{
    float exponent = (float)(2 * i) / (float)dim;
    return 1.0f / powf((float)theta, exponent);
}

static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_factor(const rope_config *r, int64_t max_pos)
{
    if (r->factor > 0)
        return r->factor;
    if (r->original_max_position_embeddings > 0)
        return (double)max_pos / (double)r->original_max_position_embeddings;
    return 1.0;
}

/* transformers' _compute_longrope_parameters: the given attention_factor, else
 * sqrt(1 + ln(factor) / ln(original_max)), 1 when the context is not extended (factor <= 1). */
static double longrope_scaling(const rope_config *r)
{
    if (r->attention_factor >= 0)
        return r->attention_factor;
    if (r->factor <= 1.0 || r->original_max_position_embeddings <= 1)
        return 1.0;
    return sqrt(1.0 + log(r->factor) / log((double)r->original_max_position_embeddings));
}

double rope_attention_scaling(const rope_config *r)
{
    if (r->type == ROPE_LONGROPE)
        return longrope_scaling(r);
    if (r->type != ROPE_YARN)
        return 1.0;
    if (r->attention_factor >= 0)
        return r->attention_factor;
    double factor = r->factor > 0 ? r->factor : 1.0;
    if (r->mscale > 0 && r->mscale_all_dim > 0)
        return (float)(yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim));
    return yarn_mscale(factor, 1.0);
}

static double correction_dim(double rotations, int64_t dim, double base, double max_pos)
{
    return ((double)dim * log(max_pos / (rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

static void yarn(const rope_config *r, int64_t dim, int64_t max_pos, float *inv)
{
    double factor = yarn_factor(r, max_pos);
    double orig = (double)(r->original_max_position_embeddings > 0
                               ? r->original_max_position_embeddings : max_pos);
    double beta_fast = r->beta_fast > 0 ? r->beta_fast : 32.0;
    double beta_slow = r->beta_slow > 0 ? r->beta_slow : 1.0;
    double low = correction_dim(beta_fast, dim, r->theta, orig);
    double high = correction_dim(beta_slow, dim, r->theta, orig);
    if (r->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0)
        low = 0;
    if (high > (double)(dim - 1))
        high = (double)(dim - 1);
    if (low == high)
        high += 0.001;
    for (int64_t i = 0; i < dim / 2; i++) {
        float pos_freq = powf((float)r->theta, (float)(2 * i) / (float)dim);
        float extrapolation = 1.0f / pos_freq;
        float interpolation = 1.0f / ((float)factor * pos_freq);
        float ramp = ((float)i - (float)low) / (float)(high - low);
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        float extra_factor = 1.0f - ramp;
        inv[i] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
    }
}

static void llama3(const rope_config *r, int64_t dim, float *inv)
{
    double old = (double)r->original_max_position_embeddings;
    double low_wavelen = old / r->low_freq_factor;
    double high_wavelen = old / r->high_freq_factor;
    float factor = (float)r->factor;
    for (int64_t i = 0; i < dim / 2; i++) {
        float f = default_inv(r->theta, i, dim);
        float wavelen = (float)(2.0 * M_PI) / f;
        float scaled = (double)wavelen > low_wavelen ? f / factor : f;
        bool medium = !((double)wavelen < high_wavelen) && !((double)wavelen > low_wavelen);
        if (medium) {
            float smooth = (float)(((float)old / wavelen - (float)r->low_freq_factor) /
                                   (float)(r->high_freq_factor - r->low_freq_factor));
            scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
        }
        inv[i] = scaled;
    }
}

void rope_longrope_inv_freq(const rope_config *r, int64_t dim, bool long_set, float *inv)
{
    const float *ext = long_set ? r->long_factor : r->short_factor;
    for (int64_t i = 0; i < dim / 2; i++) {
        float exponent = (float)(2 * i) / (float)dim;
        /* the rope op holds n_factors == dim/2 (infer.c); never read past what a set holds */
        float f = i < r->n_factors && i < ROPE_MAX_FACTORS ? ext[i] : 1.0f;
        inv[i] = 1.0f / (f * powf((float)r->theta, exponent));
    }
}

void rope_inv_freq(const rope_config *r, int64_t dim, int64_t max_pos, float *inv)
{
    switch (r->type) {
    case ROPE_LONGROPE:
        rope_longrope_inv_freq(r, dim, false, inv);
        return;
    case ROPE_YARN:
        yarn(r, dim, max_pos, inv);
        return;
    case ROPE_LLAMA3:
        llama3(r, dim, inv);
        return;
    case ROPE_LINEAR:
        for (int64_t i = 0; i < dim / 2; i++)
            inv[i] = default_inv(r->theta, i, dim) / (float)r->factor;
        return;
    case ROPE_DEFAULT:
    case ROPE_DYNAMIC:
        for (int64_t i = 0; i < dim / 2; i++)
            inv[i] = default_inv(r->theta, i, dim);
        return;
    }
}
