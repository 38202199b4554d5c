// Where an output came from: the attnlab version and commit, the command line,
// the host's CPU and threads. Every run, sweep and analysis output records it
// (config.toml's and summary.json's neighbour provenance.json, HDF5 root attributes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

const char* attnlab_version();  // "0.27.0" (generated at build time)
const char* attnlab_commit();   // "1a2b3c4d5e6f", "...-dirty", or "unknown"

struct Provenance {
    std::string version, commit;
    std::string command_line;  // the arguments, shell-quoted where needed
    std::string cpu;           // /proc/cpuinfo's model name
    long cpus = 0;             // CPUs this process may use
    long threads = 0;          // compute threads the command runs
};

// The command line of this process: set once by main (run_cli).
void set_command_line(int argc, char** argv);
// `threads`: the compute threads to record; 0 = this process's pool size now.
Provenance provenance(long threads = 0);
// {"version": ..., "commit": ..., "command_line": ..., "cpu": ..., "cpus": N, "threads": N} (one JSON object)
std::string provenance_json(const Provenance& p);
// The same as flat JSON members, for summary.json: "attnlab_version": ..., "attnlab_commit": ...,
// "command_line": ..., "cpu": ..., "cpus": N, "threads": N (no braces)
std::string provenance_json_members(const Provenance& p);
// The same as root attributes of an HDF5 output (attnlab_version, attnlab_commit,
// command_line, cpu, cpus, threads).
namespace h5 { class Group; }
void write_provenance_attrs(const h5::Group& file, const Provenance& p);
// The root attributes every analysis output of a checkpoint starts with
// (docs/file_formats.md): this process's provenance, format, format_version 1,
// and the checkpoint file and step it read.
void write_output_attrs(const h5::Group& file, const std::string& format, const std::string& checkpoint, int64_t step);
// "attnlab 0.27.0 (commit 1a2b3c4d5e6f)"
std::string version_line();

}  // namespace attnlab
