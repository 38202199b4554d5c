// A runs file as `attnlab train --runs FILE` reads it (experiments/run/runs_file.h):
// the input is the file's bytes, read from the repository's root as scripts/fuzz.sh
// runs it, so the seeds (tests/fuzz/corpus/fuzz_runs_file/) name real configs
// (configs/copy.toml; configs/sweeps/*.toml, which have a [sweep]) and folders
// and reach every check. A file that reads must list at least one run, each
// folder once; written back with runs_file_text, it must read to the same runs.
#include <cstdio>
#include <cstdlib>
#include <set>

#include "experiments/run/runs_file.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace attnlab;
    const fuzz::TempFile file(data, size, ".toml");
    fuzz::expect_bad_input_only([&] {
        const RunsFile read = read_runs_file(file.path());
        if (read.runs.empty() || (read.mode != "threads" && read.mode != "stacked")) std::abort();
        std::set<std::string> dirs;
        std::vector<RunsFileEntry> entries;
        for (const Trainer::GroupRun& run : read.runs) {
            if (run.dir.empty() || !dirs.insert(run.dir).second) std::abort();
            entries.push_back(run.config ? RunsFileEntry{"configs/copy.toml", run.dir, ""} : RunsFileEntry{"", "", run.dir});
        }
        const std::string text = runs_file_text(read.mode, entries);  // back and read again: the same runs
        const fuzz::TempFile again(reinterpret_cast<const uint8_t*>(text.data()), text.size(), ".toml");
        RunsFile reread;
        try {
            reread = read_runs_file(again.path());
        } catch (const Error& e) {  // what runs_file_text writes always reads
            std::fprintf(stderr, "fuzz: the runs file written back does not read: %s\n%s", e.what(), text.c_str());
            std::abort();
        }
        if (reread.mode != read.mode || reread.runs.size() != read.runs.size()) std::abort();
        for (size_t i = 0; i < read.runs.size(); ++i)
            if (reread.runs[i].dir != read.runs[i].dir || bool(reread.runs[i].config) != bool(read.runs[i].config)) std::abort();
    });
    return 0;
}
