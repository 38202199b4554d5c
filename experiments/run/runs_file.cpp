#include "experiments/run/runs_file.h"

#include <filesystem>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "autograd/tensor.h"  // Error
#include "experiments/files/run_files.h"  // folder_path

namespace fs = std::filesystem;

namespace attnlab {

std::string runs_file_text(const std::string& mode, const std::vector<RunsFileEntry>& runs) {
    toml::array list;
    for (const RunsFileEntry& r : runs) {
        toml::table run;
        if (!r.resume.empty()) run.insert("resume", r.resume);
        else run.insert("config", r.config), run.insert("dir", r.dir);
        list.push_back(std::move(run));
    }
    toml::table file{{"mode", mode}, {"run", std::move(list)}};
    std::ostringstream out;
    out << "# attnlab train --runs: these runs trained side by side in one process\n" << file << "\n";
    return out.str();
}

namespace {

std::string at(const std::string& path, const toml::source_position& where) {
    return "[train] --runs " + path + ":" + std::to_string(where.line) + ": ";
}

// The string value of `key` in `table`, or "" when absent; any other type is refused.
std::string text_of(const toml::table& table, const std::string& key, const std::string& path) {
    const toml::node* node = table.get(key);
    if (!node) return "";
    const auto* text = node->as_string();
    if (!text || text->get().empty())
        throw Error(at(path, node->source().begin) + key + ": expected a path (a non-empty string)");
    return text->get();
}

}  // namespace

RunsFile read_runs_file(const std::string& path) {
    const std::string where = "[train] --runs " + path + ": ";
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw Error(where + (fs::exists(path, ec) ? "not a file" : "no such file"));
    toml::table document;
    try {
        document = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        throw Error(at(path, e.source().begin) + "TOML syntax error: " + std::string(e.description()));
    }
    RunsFile out;
    for (auto&& [name, node] : document)
        if (name.str() != "mode" && name.str() != "run")
            throw Error(at(path, name.source().begin) + "unknown key '" + std::string(name.str()) + "' (the file holds mode and [[run]])");
    if (const toml::node* mode = document.get("mode")) {
        const auto* text = mode->as_string();
        if (!text || (text->get() != "threads" && text->get() != "stacked"))
            throw Error(at(path, mode->source().begin) + "mode: expected \"threads\" or \"stacked\" (as train.seeds_mode)");
        out.mode = text->get();
    }
    const toml::array* list = document.get_as<toml::array>("run");
    if (!list || list->empty()) throw Error(where + "no [[run]]: list the runs to train side by side");
    std::set<fs::path> folders;
    for (size_t i = 0; i < list->size(); ++i) {
        const toml::node& node = (*list)[i];
        const toml::table* run = node.as_table();
        if (!run) throw Error(at(path, node.source().begin) + "run " + std::to_string(i + 1) + ": expected a [[run]] table");
        for (auto&& [name, value] : *run)
            if (name.str() != "config" && name.str() != "dir" && name.str() != "resume")
                throw Error(at(path, name.source().begin) + "run " + std::to_string(i + 1) + ": unknown key '" + std::string(name.str()) +
                            "' (a run has config and dir, or resume)");
        const std::string config = text_of(*run, "config", path), dir = text_of(*run, "dir", path), resume = text_of(*run, "resume", path);
        const bool fresh = !config.empty() || !dir.empty();  // a new run: config and dir, no resume
        if (fresh ? config.empty() || dir.empty() || !resume.empty() : resume.empty())
            throw Error(at(path, node.source().begin) + "run " + std::to_string(i + 1) +
                        ": give config and dir (a new run) or resume (a run to continue), not both");
        Trainer::GroupRun group_run;
        group_run.dir = fresh ? dir : resume;
        if (!folders.insert(folder_path(fs::absolute(group_run.dir).string())).second)
            throw Error(at(path, node.source().begin) + "run " + std::to_string(i + 1) + ": " + group_run.dir + " is listed twice");
        if (fresh) {
            Config loaded = load_config(config);
            if (!loaded.sweep.empty()) throw Error(where + config + " has a [sweep] table: list the runs of its cells");
            if (!loaded.train.seeds.empty()) throw Error(where + config + " sets train.seeds: list one run for each seed");
            group_run.config = std::move(loaded);
        }
        out.runs.push_back(std::move(group_run));
    }
    return out;
}

}  // namespace attnlab
