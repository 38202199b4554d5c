// The one place attnlab includes xtensor. Op code works on Array<T>, an owning,
// contiguous, row-major xtensor container.
//
// Pitfall (xtensor's own docs, and seen with xtensor 0.24 here): never keep a lazy
// expression in `auto` or capture one in a closure. Evaluate into an Array first.
// Lazy keep_dims reducers inside a larger expression also give wrong values in
// 0.24.3, so reductions are always evaluated into their own container.
#pragma once

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

namespace attnlab {

template <class T>
using Array = xt::xarray<T, xt::layout_type::row_major>;

}  // namespace attnlab
