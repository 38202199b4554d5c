// What the C++ benchmarks share: the median, JSON strings, peak memory and the
// sgemm probe that shows how fast this machine's GEMMs are right now.
#pragma once

#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace attnlab::bench {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') { out += "\\n"; continue; }
        out += c;
    }
    return out + "\"";
}

// The CPU's model name (/proc/cpuinfo), for the tables' headers.
inline std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
    return "unknown";
}

// Peak resident memory of this process so far (getrusage), in MiB.
inline double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// C[b] = op(A[b]) op(B[b]) for b < batch, C[b] (M,N): a loop of plain cblas_sgemm calls.
inline void sgemm_loop(size_t batch, bool trans_a, bool trans_b, size_t M, size_t N, size_t K, const float* A,
                       const float* B, float* C) {
    const int lda = static_cast<int>(trans_a ? M : K), ldb = static_cast<int>(trans_b ? K : N);
    for (size_t b = 0; b < batch; ++b)
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A + b * M * K, lda,
                    B + b * K * N, ldb, 0.0f, C + b * M * N, static_cast<int>(N));
}

// The machine's GEMM speed now, at OpenBLAS's current thread count: one
// 1024^3 sgemm, median of 5 after one that touches the buffers. The Python
// benchmarks time the same product through torch.mm. This VM's CPUs sometimes
// give the throughput of fewer cores for minutes, unseen by /proc/stat; probes
// at the start and end of each process show in which state it ran.
inline double sgemm_gflops() {
    constexpr size_t n = 1024;
    std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n);
    std::vector<double> times;
    for (int rep = 0; rep < 6; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        sgemm_loop(1, false, false, n, n, n, A.data(), B.data(), C.data());
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    times.erase(times.begin());
    return 2.0 * n * n * n / median(times) * 1e-9;
}

inline void print_probe(const char* when, int threads) {
    std::cout << "{\"framework\": \"attnlab\", \"probe\": " << json_string(when) << ", \"threads\": " << threads
              << ", \"gflops\": " << sgemm_gflops() << "}" << std::endl;
}

}  // namespace attnlab::bench
