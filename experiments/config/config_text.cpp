// How strings are written into a config file (TOML basic strings), and the key
// listing of `attnlab train --keys`.
#include <algorithm>
#include <cstdio>

#include "experiments/config/config.h"
#include "experiments/config/config_schema.h"

namespace attnlab::config_schema {

std::string quote(const std::string& text) {
    std::string out = "\"";
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') out += '\\', out += ch;
        else if (c < 0x20 || c == 0x7f) {
            char escape[8];
            std::snprintf(escape, sizeof escape, "\\u%04x", c);
            out += escape;
        } else out += ch;
    }
    return out + "\"";
}

}  // namespace attnlab::config_schema

namespace attnlab {

std::string describe_keys() {
    using config_schema::Field, config_schema::fields;
    const Config defaults;
    size_t key_width = 0, default_width = 0;
    for (const Field& f : fields()) {
        key_width = std::max(key_width, f.key.size());
        default_width = std::max(default_width, f.write(defaults).size());
    }
    auto pad = [](std::string s, size_t width) { return s + std::string(width - s.size() + 2, ' '); };
    std::string out = pad("key", key_width) + pad("default", default_width) + "meaning (allowed values)\n";
    for (const Field& f : fields())
        out += pad(f.key, key_width) + pad(f.write(defaults), default_width) + f.doc + " (" + f.allowed + ")\n";
    out += pad("sweep", key_width) + pad("", default_width) +
           "[sweep] \"model.heads\" = [1, 2, 4]: a grid over any keys above, one run per cell\n";
    out += "\nA key that the other keys leave unread (model.rotary_base without rotary positions, optim.momentum with adam,\n"
           "...) is refused unless it is at its default; the table is in docs/config.md.\n";
    return out;
}

}  // namespace attnlab
