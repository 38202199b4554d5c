// attnlab gradcheck [OP ...]: runs the float64 gradient-check registry and
// prints one row per op, then "gradcheck: N passed, M failed". Exit 1 on failure.
#include <cstdio>
#include <map>
#include <set>

#include "autograd/gradcheck.h"
#include "experiments/cli/commands.h"

namespace attnlab {

int cmd_gradcheck(const std::vector<std::string>& args) {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
        std::printf("usage: attnlab gradcheck [OP ...]\n"
                    "Checks every op's analytic gradient against float64 central differences\n"
                    "(eps 1e-6, atol 1e-5, rtol 1e-3, as PyTorch's gradcheck). Exit 1 if any fails.\n");
        return 0;
    }
    const std::vector<GradcheckCase> registry = gradcheck_registry();
    std::set<std::string> known;
    for (const auto& c : registry) known.insert(c.op);
    for (const auto& name : args)
        if (!known.count(name)) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            throw UsageError("unknown op '" + name + "'; known ops: " + list);
        }
    const std::set<std::string> wanted(args.begin(), args.end());

    struct Row {
        int cases = 0;
        double max_abs = 0, max_rel = 0;
        bool passed = true;
        std::string failure;
    };
    std::vector<std::string> order;
    std::map<std::string, Row> rows;
    for (const auto& c : registry) {
        if (!wanted.empty() && !wanted.count(c.op)) continue;
        if (!rows.count(c.op)) order.push_back(c.op);
        Row& row = rows[c.op];
        GradcheckResult r;
        try {
            r = gradcheck(c);
        } catch (const std::exception& e) {
            r.passed = false;
            r.failure = e.what();
        }
        row.cases += 1;
        row.max_abs = std::max(row.max_abs, r.max_abs_error);
        row.max_rel = std::max(row.max_rel, r.max_rel_error);
        if (!r.passed && row.passed) row.failure = c.name + ": " + r.failure;
        row.passed = row.passed && r.passed;
    }
    std::printf("%-14s %5s %14s %14s  %s\n", "op", "cases", "max abs err", "max rel err", "result");
    int passed = 0, failed = 0;
    for (const auto& op : order) {
        const Row& row = rows[op];
        std::printf("%-14s %5d %14.3e %14.3e  %s\n", op.c_str(), row.cases, row.max_abs, row.max_rel,
                    row.passed ? "pass" : ("FAIL (" + row.failure + ")").c_str());
        (row.passed ? passed : failed) += 1;
    }
    std::printf("gradcheck: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

}  // namespace attnlab
