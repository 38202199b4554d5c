// An option's choices, listed once: each value with its name. The parser, the
// name a value prints as, and the list the config schema offers (train --keys,
// its errors) read the one table, so adding a choice is one line here.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace attnlab {

template <class E>
struct Choices {
    std::string tag;      // the error's "[tag]"
    std::string subject;  // what the message names before "must be" ("masked_rows "), or ""
    std::vector<std::pair<E, std::string>> items;

    E parse(const std::string& name) const {
        for (const auto& [value, n] : items)
            if (n == name) return value;
        fail(tag, subject + "must be " + listed() + ", got \"" + name + "\"");
    }
    std::string name(E value) const {
        for (const auto& [v, n] : items)
            if (v == value) return n;
        fail(tag, "a value with no name");
    }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& item : items) out.push_back(item.second);
        return out;
    }
    // "\"a\", \"b\" or \"c\""
    std::string listed() const {
        std::string out;
        for (size_t i = 0; i < items.size(); ++i)
            out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + ("\"" + items[i].second + "\"");
        return out;
    }
};

}  // namespace attnlab
