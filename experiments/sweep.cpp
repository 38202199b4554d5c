#include "experiments/sweep.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "experiments/h5file.h"

extern char** environ;

namespace fs = std::filesystem;

namespace attnlab {

namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

std::string unquote(const std::string& value) {
    return value.size() >= 2 && value.front() == '"' && value.back() == '"' ? value.substr(1, value.size() - 2) : value;
}

// The numbers of our own flat summary.json ("key": number | null, one per line).
std::map<std::string, double> read_summary_numbers(const fs::path& path) {
    std::ifstream in(path);
    std::map<std::string, double> out;
    const std::regex line(R"re(^\s*"(\w+)":\s*(null|[-+0-9.eEinfa]+),?\s*$)re");
    std::string text;
    while (std::getline(in, text)) {
        std::smatch m;
        if (std::regex_match(text, m, line)) out[m[1]] = m[2] == "null" ? kMissing : std::stod(m[2]);
    }
    return out;
}

// Per kind and layer: mean over heads of the last logged entropy rows; and the
// largest masked mass of any row, kind, layer and head.
void read_attention_numbers(const fs::path& metrics, std::map<std::string, double>& numbers,
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

void write_atomically(const fs::path& path, const std::string& text) {
    const fs::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp);
        out << text;
        if (!out) throw Error("[sweep] cannot write " + tmp.string());
    }
    fs::rename(tmp, path);
}

// Starts `args` with stdout and stderr appended to `log`; returns its pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw Error("[sweep] cannot start " + args[0] + ": " + std::strerror(rc));
    return pid;
}

std::string fmt(double v, int precision = 4) {
    if (std::isnan(v)) return "";
    std::ostringstream out;
    out.precision(precision);
    out << v;
    return out.str();
}

}  // namespace

std::string cell_name(size_t index, size_t count, const std::vector<std::string>& assignments) {
    const size_t digits = std::to_string(std::max<size_t>(count, 1) - 1).size();
    std::string name = std::to_string(index);
    name = std::string(digits > name.size() ? digits - name.size() : 0, '0') + name + "_";
    for (size_t i = 0; i < assignments.size(); ++i) {
        const size_t eq = assignments[i].find('=');
        name += (i ? "," : "") + assignments[i].substr(0, eq + 1) + unquote(assignments[i].substr(eq + 1));
    }
    for (char& ch : name)
        if (ch == '/' || ch == ' ' || ch == '"' || ch == '[' || ch == ']') ch = '_';
    return name;
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
            const auto summary = read_summary_numbers(dir / "summary.json");
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

namespace {

// RFC 4180: a field holding a comma, a quote or a line break is quoted, quotes doubled.
std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
    std::string out = "\"";
    for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

void write_csv(const SweepTable& t, const fs::path& path) {
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
    write_atomically(path, out.str());
}

void write_h5(const SweepTable& t, const fs::path& path) {
    const fs::path tmp = path.string() + ".tmp";
    {
        h5::File file = h5::File::create(tmp.string(), "sweep");
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
    }
    fs::rename(tmp, path);
}

}  // namespace

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

SweepTable run_sweep(const Config& config, const SweepOptions& options) {
    if (config.sweep.empty()) throw Error("[sweep] the config has no [sweep] table");
    const auto cells = sweep_cells(config);
    if (cells.size() > options.max_cells && !options.force)
        throw Error("[sweep] the grid has " + std::to_string(cells.size()) + " cells, more than the limit of " +
                    std::to_string(options.max_cells) + "; pass --force to run it");
    const size_t jobs = std::max<size_t>(1, options.jobs);
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const int64_t threads = std::max<int64_t>(1, cores / static_cast<long>(jobs));

    // Every cell's config is built and validated before any cell starts.
    const fs::path sweep_dir = fs::path(config.run.out_dir) / config.run.name;
    std::vector<std::pair<std::string, Config>> plan;
    for (size_t i = 0; i < cells.size(); ++i) {
        Config cell = config;
        cell.sweep.clear();
        for (const std::string& assignment : cells[i]) apply_override(cell, assignment);
        cell.train.threads = threads;
        cell.run.name = cell_name(i, cells.size(), cells[i]);
        cell.run.out_dir = sweep_dir.string();
        validate(cell);
        plan.emplace_back(cell.run.name, cell);
    }
    // A cell folder left by an earlier run of this sweep must hold the same
    // config (threads aside, which follow --jobs): otherwise skipping or
    // resuming it would tabulate another experiment's results.
    for (const auto& [name, cell] : plan) {
        const fs::path existing = sweep_dir / name / "config.toml";
        if (!fs::exists(existing)) continue;
        Config earlier = load_config(existing.string());
        earlier.train.threads = cell.train.threads;
        if (cell.model.max_len == 0) earlier.model.max_len = 0;  // the run writes the length it derived
        earlier.run.out_dir = cell.run.out_dir;
        if (earlier == cell) continue;
        std::istringstream a(to_toml(earlier)), b(to_toml(cell));
        std::string section, la, lb;
        while (std::getline(a, la) && std::getline(b, lb)) {
            if (!la.empty() && la.front() == '[') section = la.substr(1, la.find(']') - 1);
            if (la != lb) break;
        }
        throw Error("[sweep] " + (sweep_dir / name).string() + " was run with " + section + "." + la +
                    ", this sweep has " + section + "." + lb + "; use another run.name, or remove the folder");
    }
    fs::create_directories(sweep_dir / "cells");
    fs::create_directories(sweep_dir / "logs");
    write_atomically(sweep_dir / "sweep.toml", to_toml(config));

    std::map<std::string, std::string> outcome;
    std::map<pid_t, std::string> running;
    auto wait_one = [&] {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, 0);
        if (pid <= 0) return;
        const std::string name = running[pid];
        running.erase(pid);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        outcome[name] = code == 0 ? "ok" : "failed (exit " + std::to_string(code) + ")";
        std::cerr << "sweep: " << name << ": " << outcome[name]
                  << (code ? ", see " + (sweep_dir / "logs" / (name + ".log")).string() : "") << "\n";
    };
    for (size_t i = 0; i < plan.size(); ++i) {
        const auto& [name, cell] = plan[i];
        const fs::path dir = sweep_dir / name;
        std::vector<std::string> args{options.executable, "train"};
        std::string action = "starting";
        if (fs::exists(dir / "summary.json")) {
            std::cerr << "sweep: " << name << ": finished earlier, skipped\n";
            continue;
        }
        if (fs::exists(dir / "checkpoints") && !fs::is_empty(dir / "checkpoints")) {
            args.insert(args.end(), {"--resume", dir.string()});
            action = "resuming";
        } else {
            fs::remove_all(dir);  // started earlier but never checkpointed: nothing to keep
            const fs::path cell_config = sweep_dir / "cells" / (std::to_string(i) + ".toml");
            write_atomically(cell_config, to_toml(cell));
            args.insert(args.end(), {cell_config.string(), "--run-dir", dir.string()});
        }
        while (running.size() >= jobs) wait_one();
        std::cerr << "sweep: " << name << ": " << action << "\n";
        running[spawn(args, sweep_dir / "logs" / (name + ".log"))] = name;
    }
    while (!running.empty()) wait_one();

    SweepTable table = collect_sweep(config, sweep_dir.string());
    for (CellResult& c : table.cells)
        if (outcome.count(c.name) && outcome[c.name] != "ok") c.status = outcome[c.name];
    table.aggregated = aggregate_over_seeds(table);
    write_csv(table, sweep_dir / "summary.csv");
    write_h5(table, sweep_dir / "summary.h5");
    return table;
}

}  // namespace attnlab
