// The sweep's table: each cell's summary.json and metrics.h5 read back, the
// aggregates over run.seed, and summary.csv / summary.h5.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "experiments/files/provenance.h"
#include "data/h5_probe.h"
#include "data/h5file.h"
#include "experiments/files/parse_number.h"
#include "experiments/files/run_files.h"
#include "experiments/sweep/sweep.h"

namespace fs = std::filesystem;

namespace attnlab {

namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// A reader of the flat JSON object trainer.cpp writes ("key": number | null |
// string, one per line). Every problem names the file, the line and the key.
class SummaryReader {
public:
    SummaryReader(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}

    std::map<std::string, double> numbers() {
        std::map<std::string, double> out;
        expect('{', "the file does not start with '{'");
        if (peek() == '}') return finish(out);
        for (;;) {  // each turn consumes one "key": value, so it ends with the text
            key_.clear();
            const std::string key = string_value("a quoted key");
            key_ = key;
            expect(':', "expected ':' after the key");
            skip_space();
            if (at() == '"') {
                (void)string_value("a string");
                if (is_number_column(key)) fail("expected a number, got a string");
            } else {
                out[key] = number();
            }
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            expect('}', "expected ',' or '}' after the value");
            return finish(out);
        }
    }

private:
    // the strings of summary.json: where the run is, and its provenance (experiments/files/provenance.h)
    static bool is_number_column(const std::string& key) {
        return key != "run_dir" && key != "attnlab_version" && key != "attnlab_commit" && key != "command_line" && key != "cpu";
    }

    [[noreturn]] void fail(const std::string& problem) const {
        const long line = 1 + std::count(text_.begin(), text_.begin() + static_cast<long>(std::min(pos_, text_.size())), '\n');
        throw Error("[sweep] " + path_ + ":" + std::to_string(line) + ": " + (key_.empty() ? "" : key_ + ": ") + problem +
                    " (a garbled summary.json: remove it and rerun the sweep, which resumes the cell from its last checkpoint)");
    }
    char at() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
    void skip_space() {
        while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    char peek() {
        skip_space();
        return at();
    }
    void expect(char ch, const std::string& problem) {
        if (peek() != ch) fail(problem);
        ++pos_;
    }
    std::map<std::string, double>& finish(std::map<std::string, double>& out) {
        if (peek() == '}') ++pos_;
        if (peek() != '\0') fail("text after the closing '}'");
        return out;
    }
    std::string string_value(const std::string& what) {
        if (peek() != '"') fail("expected " + what);
        std::string out;
        for (++pos_; pos_ < text_.size() && text_[pos_] != '"'; ++pos_) {
            if (text_[pos_] == '\n') break;
            if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;  // the escaped character, as it is
            out += text_[pos_];
        }
        if (at() != '"') fail("unterminated string");
        ++pos_;
        return out;
    }
    // A JSON number, null, or nan / inf / -inf (what a C++ stream writes for them).
    double number() {
        const size_t begin = pos_;
        while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                       text_[pos_] == '-' || text_[pos_] == '+'))
            ++pos_;
        const std::string token = text_.substr(begin, pos_ - begin);
        if (token == "null") return kMissing;
        if (token.empty()) fail("expected a value");
        const std::optional<double> value = parse_whole<double>(token);
        if (!value) fail("expected a number, got '" + token + "'");
        return *value;
    }

    std::string path_, text_, key_;
    size_t pos_ = 0;
};

// Per kind and layer: mean over heads of the last logged entropy rows; and the
// largest masked mass of any row, kind, layer and head.
void read_attention_numbers_unprobed(const fs::path& metrics, std::map<std::string, double>& numbers,
                                     std::vector<std::string>& columns) {
    h5::File file = h5::File::open(metrics.string(), "sweep", h5::File::Access::read, true, true);
    double masked_max = 0.0;
    if (!file.has("attention")) return;
    h5::Group attention = file.group("attention");
    for (const std::string& kind : attention.members()) {
        h5::Group g = attention.group(kind);
        const size_t rows = g.dataset("step").rows();
        if (rows == 0) continue;
        const Shape shape = g.dataset("entropy").shape();  // [K, layers, heads]
        const size_t layers = shape[1], heads = shape[2];
        for (const char* series : {"entropy", "entropy_norm"}) {
            const std::vector<double> last = g.dataset(series).read_rows<double>(rows - 1, 1);
            for (size_t l = 0; l < layers; ++l) {
                double total = 0;
                for (size_t h = 0; h < heads; ++h) total += last[l * heads + h];
                const std::string column = std::string(series) + "_" + kind + "_L" + std::to_string(l);
                numbers[column] = total / static_cast<double>(heads);
                if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
            }
        }
        for (double v : g.dataset("masked_mass_max").read<double>())
            if (!std::isnan(v)) masked_max = std::max(masked_max, v);
    }
    numbers["masked_mass_max"] = masked_max;
}

// First in a child (data/h5_probe.h): a cell's metrics.h5 may be crafted, and
// libhdf5 crashes on some crafted files.
void read_attention_numbers(const fs::path& metrics, std::map<std::string, double>& numbers,
                            std::vector<std::string>& columns) {
    h5::probe(metrics.string(), "sweep", [&] {
        std::map<std::string, double> scratch_numbers = numbers;
        std::vector<std::string> scratch_columns = columns;
        read_attention_numbers_unprobed(metrics, scratch_numbers, scratch_columns);
    });
    read_attention_numbers_unprobed(metrics, numbers, columns);
}

std::string fmt(double v, int precision = 4) {
    if (std::isnan(v)) return "";
    std::ostringstream out;
    out.precision(precision);
    out << v;
    return out.str();
}

// RFC 4180: a field holding a comma, a quote or a line break is quoted, quotes doubled.
std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
    std::string out = "\"";
    for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

}  // namespace

std::map<std::string, double> read_summary_numbers(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw Error("[sweep] " + path + ": cannot read it");
    return SummaryReader(path, text.str()).numbers();
}

SweepTable collect_sweep(const Config& config, const std::string& sweep_dir) {
    SweepTable table;
    for (const SweepAxis& axis : config.sweep) table.keys.push_back(axis.key);
    table.columns = {"eval_loss", "eval_token_acc", "eval_seq_acc", "first_step_at_target", "reached_target"};
    std::vector<std::string> attention_columns;
    const auto cells = sweep_cells(config);
    for (size_t i = 0; i < cells.size(); ++i) {
        CellResult cell;
        cell.name = cell_name(i, cells.size(), cells[i]);
        for (const std::string& a : cells[i]) cell.values.push_back(unquote(a.substr(a.find('=') + 1)));
        const fs::path dir = fs::path(sweep_dir) / cell.name;
        for (const std::string& c : table.columns) cell.numbers[c] = kMissing;
        if (fs::exists(dir / "summary.json")) {
            const auto summary = read_summary_numbers((dir / "summary.json").string());
            for (const auto& [key, value] : summary) cell.numbers[key] = value;
            cell.numbers["reached_target"] = std::isnan(cell.numbers["first_step_at_target"]) ? 0.0 : 1.0;
            cell.status = "ok";
        } else {
            cell.status = fs::exists(dir) ? "incomplete" : "not run";
        }
        if (fs::exists(dir / "metrics.h5")) {
            try {
                read_attention_numbers(dir / "metrics.h5", cell.numbers, attention_columns);
            } catch (const Error& e) {
                cell.status += " (metrics unreadable)";
            }
        }
        table.cells.push_back(std::move(cell));
    }
    table.columns.insert(table.columns.end(), attention_columns.begin(), attention_columns.end());
    for (const char* c : {"masked_mass_max", "wall_s", "tokens_per_s"}) table.columns.push_back(c);
    table.aggregated = aggregate_over_seeds(table);
    return table;
}

std::vector<CellResult> aggregate_over_seeds(const SweepTable& table) {
    const auto seed_axis = std::find(table.keys.begin(), table.keys.end(), "run.seed") - table.keys.begin();
    std::vector<CellResult> groups;
    std::map<std::vector<std::string>, size_t> index;
    std::map<size_t, std::vector<const CellResult*>> members;
    for (const CellResult& cell : table.cells) {
        std::vector<std::string> key = cell.values;
        if (static_cast<size_t>(seed_axis) < key.size()) key[static_cast<size_t>(seed_axis)] = "*";
        auto [it, added] = index.emplace(key, groups.size());
        if (added) {
            CellResult g;
            g.values = key;
            groups.push_back(g);
        }
        members[it->second].push_back(&cell);
    }
    for (size_t g = 0; g < groups.size(); ++g) {
        const auto& cells = members[g];
        size_t ok = 0;
        for (const CellResult* c : cells) ok += c->status == "ok";
        // only finished cells count: a failed cell's partial metrics are not a result
        groups[g].status = std::to_string(ok) + "/" + std::to_string(cells.size()) + " ok";
        groups[g].numbers["n"] = static_cast<double>(cells.size());
        for (const std::string& column : table.columns) {
            std::vector<double> xs;
            for (const CellResult* c : cells) {
                if (c->status != "ok") continue;
                auto it = c->numbers.find(column);
                if (it != c->numbers.end() && !std::isnan(it->second)) xs.push_back(it->second);
            }
            double mean = kMissing, stddev = kMissing;
            if (!xs.empty()) {
                mean = 0;
                for (double x : xs) mean += x;
                mean /= static_cast<double>(xs.size());
                double ss = 0;
                for (double x : xs) ss += (x - mean) * (x - mean);
                stddev = xs.size() > 1 ? std::sqrt(ss / static_cast<double>(xs.size() - 1)) : 0.0;
            }
            groups[g].numbers[column] = mean;
            groups[g].numbers[column + "_std"] = stddev;
        }
    }
    return groups;
}

void write_summary_csv(const SweepTable& t, const std::string& path) {
    std::ostringstream out;
    out << "row,name";
    for (const auto& k : t.keys) out << "," << csv_field(k);
    out << ",status,n";
    for (const auto& c : t.columns) out << "," << c << "," << c << "_std";
    out << "\n";
    auto row = [&](const char* kind, const CellResult& r, bool aggregate) {
        out << kind << "," << csv_field(r.name);
        for (const auto& v : r.values) out << "," << csv_field(v);
        out << "," << csv_field(r.status) << "," << (aggregate ? fmt(r.numbers.at("n")) : "1");
        for (const auto& c : t.columns) {
            auto it = r.numbers.find(c);
            out << "," << (it == r.numbers.end() ? "" : fmt(it->second, 10));
            auto sd = r.numbers.find(c + "_std");
            out << "," << (aggregate && sd != r.numbers.end() ? fmt(sd->second, 10) : "");
        }
        out << "\n";
    };
    for (const auto& c : t.cells) row("cell", c, false);
    for (const auto& a : t.aggregated) row("aggregate", a, true);
    write_text_atomically(path, out.str(), "[sweep]");  // every --summarize of a Slurm array writes the same rows: the last rename wins, whole
}

void write_summary_h5(const SweepTable& t, const std::string& path) {
    write_atomically(path, "[sweep]", [&](const std::string& tmp) {
        h5::File file = h5::File::create(tmp, "sweep");
        write_provenance_attrs(file, provenance());
        file.write_attr_string("format", "attnlab-sweep");
        file.write_attr_int("format_version", 1);
        for (const auto& [group_name, rows] : {std::pair{"cells", &t.cells}, std::pair{"aggregated", &t.aggregated}}) {
            h5::Group g = file.create_group(group_name);
            std::vector<std::string> names, status;
            for (const auto& r : *rows) {
                names.push_back(r.name);
                status.push_back(r.status);
            }
            g.write_strings("name", names);
            g.write_strings("status", status);
            h5::Group keys = g.create_group("keys");
            for (size_t k = 0; k < t.keys.size(); ++k) {
                std::vector<std::string> values;
                for (const auto& r : *rows) values.push_back(r.values[k]);
                keys.write_strings(t.keys[k], values);
            }
            std::vector<std::string> columns = t.columns;
            if (group_name == std::string("aggregated")) {
                columns.push_back("n");
                for (const auto& c : t.columns) columns.push_back(c + "_std");
            }
            for (const auto& c : columns) {
                std::vector<double> values;
                for (const auto& r : *rows) {
                    auto it = r.numbers.find(c);
                    values.push_back(it == r.numbers.end() ? kMissing : it->second);
                }
                g.write<double>(c, values);
            }
        }
        file.close();
    });
}

std::string format_table(const SweepTable& t, const std::vector<CellResult>& rows) {
    std::vector<std::string> shown = {"eval_token_acc", "first_step_at_target"};
    for (const auto& c : t.columns)
        if (c.rfind("entropy_norm_", 0) == 0) shown.push_back(c);
    for (const char* c : {"masked_mass_max", "wall_s"}) shown.push_back(c);
    std::vector<std::vector<std::string>> cells;
    std::vector<std::string> header = t.keys;
    header.push_back("status");
    for (const auto& c : shown) header.push_back(c);
    cells.push_back(header);
    for (const auto& r : rows) {
        std::vector<std::string> line = r.values;
        line.push_back(r.status);
        for (const auto& c : shown) {
            auto it = r.numbers.find(c);
            std::string text = it == r.numbers.end() ? "" : fmt(it->second);
            auto sd = r.numbers.find(c + "_std");
            if (sd != r.numbers.end() && !std::isnan(sd->second) && r.numbers.count("n") && r.numbers.at("n") > 1)
                text += " ±" + fmt(sd->second, 2);
            line.push_back(text.empty() ? "-" : text);
        }
        cells.push_back(line);
    }
    std::vector<size_t> width(header.size(), 0);
    for (const auto& line : cells)
        for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
    std::ostringstream out;
    for (const auto& line : cells) {
        for (size_t i = 0; i < line.size(); ++i) out << line[i] << std::string(width[i] - line[i].size() + 2, ' ');
        out << "\n";
    }
    return out.str();
}

}  // namespace attnlab
