#include "experiments/files/provenance.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>

#include "autograd/cpu/threads.h"
#include "data/h5file.h"
#include "experiments/files/json_text.h"

namespace attnlab {

namespace {

std::string& command_line_text() {
    static std::string text;
    return text;
}

// A word as a shell reads it back: quoted when it holds anything but plain characters.
std::string shell_word(const std::string& word) {
    const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") == std::string::npos;
    if (plain) return word;
    std::string out = "'";
    for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
        }
    return "unknown";
}

}  // namespace

void set_command_line(int argc, char** argv) {
    std::string text;
    for (int i = 0; i < argc; ++i) text += (i ? " " : "") + shell_word(argv[i]);
    command_line_text() = text;
}

Provenance provenance(long threads) {
    Provenance p;
    p.version = attnlab_version();
    p.commit = attnlab_commit();
    p.command_line = command_line_text();
    p.cpu = cpu_model();
    cpu_set_t set;
    p.cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    p.threads = threads > 0 ? threads : attnlab::threads();  // this process's pool
    return p;
}

std::string provenance_json(const Provenance& p) {
    return "{\"version\": " + json_string(p.version) + ", \"commit\": " + json_string(p.commit) +
           ", \"command_line\": " + json_string(p.command_line) + ", \"cpu\": " + json_string(p.cpu) +
           ", \"cpus\": " + std::to_string(p.cpus) + ", \"threads\": " + std::to_string(p.threads) + "}";
}

std::string provenance_json_members(const Provenance& p) {
    return "\"attnlab_version\": " + json_string(p.version) + ", \"attnlab_commit\": " + json_string(p.commit) +
           ", \"command_line\": " + json_string(p.command_line) + ", \"cpu\": " + json_string(p.cpu) +
           ", \"cpus\": " + std::to_string(p.cpus) + ", \"threads\": " + std::to_string(p.threads);
}

void write_provenance_attrs(const h5::Group& file, const Provenance& p) {
    file.write_attr_string("attnlab_version", p.version);
    file.write_attr_string("attnlab_commit", p.commit);
    file.write_attr_string("command_line", p.command_line);
    file.write_attr_string("cpu", p.cpu);
    file.write_attr_int("cpus", p.cpus);
    file.write_attr_int("threads", p.threads);
}

void write_output_attrs(const h5::Group& file, const std::string& format, const std::string& checkpoint, int64_t step) {
    write_provenance_attrs(file, provenance());
    file.write_attr_string("format", format);
    file.write_attr_int("format_version", 1);
    file.write_attr_string("checkpoint", checkpoint);
    file.write_attr_int("step", step);
}

std::string version_line() { return std::string("attnlab ") + attnlab_version() + " (commit " + attnlab_commit() + ")"; }

}  // namespace attnlab
