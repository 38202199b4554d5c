#include "experiments/commands.h"

int main(int argc, char** argv) { return attnlab::run_cli(argc, argv); }
