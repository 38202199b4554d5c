// Internal to experiments/config*.cpp: the schema, one Field per dotted key,
// and the small text helpers that parsing and to_toml share.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "experiments/config/config.h"

namespace attnlab::config_schema {

struct Field {
    std::string key;      // "model.heads"
    std::string allowed;  // "integer >= 1", "\"pre\" | \"post\" | \"none\"" (for --help)
    std::string doc;      // one line
    bool bare_text = false;  // string-valued: an override's bare text is the string (model.norm=post)
    // Each returns "" when fine, else what is wrong without the key
    // ("expected an integer, got a string", "must be >= 1, got 0").
    std::function<std::string(Config&, const toml::node&)> read;  // check the TOML type, store
    std::function<std::string(const Config&)> check;               // range of the stored value
    std::function<std::string(const Config&)> write;               // stored value as TOML text
};

const std::vector<Field>& fields();  // in to_toml's order
const Field* find(std::string_view key);
bool is_section(std::string_view name);  // "run", "task", ... and "sweep"
std::string first_key_of(std::string_view section);  // "model" -> "kind" (its first key in schema order)

// " (did you mean model.heads?)", or the section's keys when nothing is close, or "".
std::string suggestion(const std::string& unknown);

std::string type_of(const toml::node& node);     // "an integer", "a string", "an array", ...
std::string format_double(double value);         // shortest text that reads back equal, as a TOML float
std::string quote(const std::string& text);      // a TOML basic string (in a message: quoted_bytes, data/quoted.h)

}  // namespace attnlab::config_schema
