// The message of the attnlab::Error a call throws ("" when it throws none): what
// the tests of one-line refusals compare.
#pragma once

#include <functional>
#include <string>

#include "autograd/tensor.h"

namespace attnlab::test {

inline std::string error_of(const std::function<void()>& call) {
    try {
        call();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace attnlab::test
