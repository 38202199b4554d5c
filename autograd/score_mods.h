// How an attention's scores are formed beyond scale q.k and its eligible keys:
// the score modifiers, written once here and read by every path. A modifier is
// one field of ScoreMods (a config key `model.<field>`, config_schema.cpp) and
// its maths in the two functions below: on tensors (the scores composed of ops,
// which every device runs and differentiates) and on one score (the audit's
// dense reference). The fused attention kernels take plain scores only; with a
// modifier, MultiHeadAttention composes attention of ops (compose by default,
// fuse by exception) and the fused ops refuse it. ALiBi's bias, added after the
// modifiers, is AttentionMask::alibi.
//
// No ops.h here: attention.h (and through it the CUDA kernels) includes this
// file, and the ops' names (max, pow, exp) would hide the maths functions there.
// modify_scores is a template whose ops are found, by argument, where it is used.
#pragma once

#include <cmath>

namespace attnlab {

struct ScoreMods {
    // Logit soft-capping (Gemma 2): a scaled score s becomes C tanh(s / C), C > 0; 0 = off.
    double softcap = 0.0;

    bool none() const { return softcap == 0.0; }  // plain scores: what the fused kernels compute
    bool operator==(const ScoreMods&) const = default;
};

// scores (B, H, Tq, Tk) (a Tensor), already scaled -> modified, before the mask and ALiBi's bias.
template <class Scores>
Scores modify_scores(const Scores& scores, const ScoreMods& mods) {
    return mods.softcap > 0.0 ? tanh(scores / mods.softcap) * mods.softcap : scores;
}

// One scaled score, as modify_scores does it (the dense reference's float64 loop).
inline double modify_score(double score, const ScoreMods& mods) {
    return mods.softcap > 0.0 ? mods.softcap * std::tanh(score / mods.softcap) : score;
}

}  // namespace attnlab
