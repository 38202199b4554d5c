#include "experiments/files/temp_files.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <unistd.h>

namespace attnlab {

namespace {

// Fixed storage: the handler may only read memory that no allocation moves.
constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
char paths[kSlots][kPathBytes];
enum Slot { kFree = 0, kFilling = 1, kReady = 2 };  // the handler reads only kReady slots
std::atomic<int> slots[kSlots];

void remove_and_die(int signal) {
    for (int i = 0; i < kSlots; ++i)
        if (slots[i].load() == kReady) ::unlink(paths[i]);  // async-signal-safe
    std::signal(signal, SIG_DFL);
    std::raise(signal);
}

}  // namespace

InFlight::InFlight(const std::string& path) {
    if (path.size() >= kPathBytes) return;
    for (int i = 0; i < kSlots; ++i) {
        int expected = kFree;
        if (slots[i].compare_exchange_strong(expected, kFilling)) {
            std::memcpy(paths[i], path.c_str(), path.size() + 1);
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
