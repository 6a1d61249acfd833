// The tri-state of every knob (util/knobs.h): unset = automatic, 1 = force on, 0 = off. Its own
// header so CUDA code can take a Tri without the knob table.
#pragma once

namespace lmf {

enum class Tri { Auto, On, Off };

// Resolve a tri-state with the automatic decision supplied by the caller.
inline bool tri_resolve(Tri t, bool automatic) { return t == Tri::Auto ? automatic : t == Tri::On; }

}  // namespace lmf
