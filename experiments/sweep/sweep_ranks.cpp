#include "experiments/sweep/sweep_ranks.h"

#include <chrono>
#include <thread>

#include "autograd/tensor.h"  // Error

namespace attnlab {

namespace {

// Messages are integers. To a serving rank: {ticket, then the characters of
// name, log and each argument, each ended by 0}, or {-1}: stop. Back: {ticket, exit status}.
constexpr int64_t kStop = -1;
constexpr std::chrono::milliseconds kTurn{20};  // how long a wait looks at one side before the other

std::vector<int64_t> encode(int64_t ticket, const std::vector<std::string>& texts) {
    std::vector<int64_t> message{ticket};
    for (const std::string& text : texts) {
        for (unsigned char ch : text) message.push_back(ch);
        message.push_back(0);
    }
    return message;
}

std::vector<std::string> decode(const std::vector<int64_t>& message) {
    std::vector<std::string> texts(1);
    for (size_t i = 1; i < message.size(); ++i) {
        if (message[i] == 0) texts.emplace_back();
        else texts.back() += static_cast<char>(message[i]);
    }
    texts.pop_back();  // after the last 0
    return texts;
}

}  // namespace

CellSlots::CellSlots(CellProcesses& processes, const World& world, size_t jobs)
    : processes_(processes), world_(world), jobs_(jobs) {}

CellSlots::~CellSlots() {
    for (int rank = 1; rank < world_.size(); ++rank) world_.send(rank, {kStop});
}

bool CellSlots::free() const {
    if (processes_.running() < jobs_) return true;
    for (int rank = 1; rank < world_.size(); ++rank) {
        const auto at = busy_.find(rank);
        if (at == busy_.end() || at->second < jobs_) return true;
    }
    return false;
}

void CellSlots::start(const std::string& name, const std::vector<std::string>& args, const std::filesystem::path& log) {
    if (processes_.running() < jobs_) return processes_.start(name, args, log);
    for (int rank = 1; rank < world_.size(); ++rank) {
        size_t& cells = busy_[rank];
        if (cells >= jobs_) continue;
        ++cells;
        const int64_t ticket = next_ticket_++;
        remote_[ticket] = name;
        std::vector<std::string> texts{name, log.string()};
        texts.insert(texts.end(), args.begin(), args.end());
        world_.send(rank, encode(ticket, texts));
        return;
    }
    throw Error("[sweep] no free slot for cell " + name);  // callers check free() first
}

std::optional<CellProcesses::Ended> CellSlots::wait() {
    for (;;) {
        while (const auto message = world_.poll()) {  // {ticket, status} from a serving rank
            const auto& [from, m] = *message;
            const auto cell = remote_.find(m.at(0));
            if (cell == remote_.end()) continue;
            CellProcesses::Ended ended{cell->second, static_cast<int>(m.at(1))};
            remote_.erase(cell);
            --busy_[from];
            return ended;
        }
        if (running() == 0) return std::nullopt;
        if (processes_.running() == 0) {
            processes_.check_interrupt();
            if (processes_.interrupted()) return std::nullopt;
            std::this_thread::sleep_for(kTurn);
            continue;
        }
        if (auto ended = processes_.wait(kTurn)) return ended;
        if (processes_.interrupted()) return std::nullopt;
    }
}

void serve_cells(const World& world, size_t jobs) {
    CellProcesses processes;  // an interrupt here goes on to this rank's cells
    std::map<std::string, int64_t> tickets;  // cell name -> its ticket
    bool stopping = false;
    while (!stopping || processes.running() > 0) {
        if (!stopping && processes.running() < jobs) {
            if (const auto message = world.poll()) {
                const std::vector<int64_t>& m = message->second;
                if (m.at(0) == kStop) {
                    stopping = true;
                    continue;
                }
                std::vector<std::string> texts = decode(m);
                const std::string name = texts.at(0), log = texts.at(1);
                texts.erase(texts.begin(), texts.begin() + 2);
                tickets[name] = m[0];
                processes.start(name, texts, log);
                continue;
            }
        }
        if (processes.running() == 0) {
            std::this_thread::sleep_for(kTurn);
            continue;
        }
        if (const auto ended = processes.wait(kTurn)) {
            world.send(0, {tickets.at(ended->name), ended->code});
            tickets.erase(ended->name);
        }
    }
}

}  // namespace attnlab
