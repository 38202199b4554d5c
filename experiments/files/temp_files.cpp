#include "experiments/files/temp_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace attnlab {

namespace {

// Fixed storage: the handler may only read memory that no allocation moves.
constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
char paths[kSlots][kPathBytes];
bool folders[kSlots];
enum Slot { kFree = 0, kFilling = 1, kReady = 2 };  // the handler reads only kReady slots
std::atomic<int> slots[kSlots];

// A folder's files, then the folder: only system calls (getdents64, unlinkat,
// rmdir), which are async-signal-safe where opendir's allocation is not.
void remove_folder(const char* path) {
    const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        alignas(8) static char entries[8192];
        ssize_t n;
        while ((n = ::getdents64(fd, entries, sizeof entries)) > 0)
            for (ssize_t at = 0; at < n;) {
                const auto* entry = reinterpret_cast<const struct dirent64*>(entries + at);
                const char* name = entry->d_name;
                if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) ::unlinkat(fd, name, 0);
                at += entry->d_reclen;
            }
        ::close(fd);
    }
    ::rmdir(path);
}

void remove_and_die(int signal) {
    for (const bool folder_pass : {false, true})  // files first: a folder's own temporaries are among them
        for (int i = 0; i < kSlots; ++i)
            if (slots[i].load() == kReady && folders[i] == folder_pass) folder_pass ? remove_folder(paths[i]) : (void)::unlink(paths[i]);
    std::signal(signal, SIG_DFL);
    std::raise(signal);
}

}  // namespace

InFlight::InFlight(const std::string& path, Kind kind) {
    if (path.size() >= kPathBytes) return;
    for (int i = 0; i < kSlots; ++i) {
        int expected = kFree;
        if (slots[i].compare_exchange_strong(expected, kFilling)) {
            std::memcpy(paths[i], path.c_str(), path.size() + 1);
            folders[i] = kind == Kind::folder;
            slots[i].store(kReady);
            slot_ = i;
            return;
        }
    }
}

InFlight::~InFlight() {
    if (slot_ >= 0) slots[slot_].store(kFree);
}

void remove_temporaries_on_signals() {
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) std::signal(signal, remove_and_die);
}

}  // namespace attnlab
