// rankstat: the operator CLI for rankstat (ranks, show, top). Everything lives in app.cpp.
#include "app.hpp"

int main(int argc, char** argv) {
  return rankstat::cli::run(argc, argv);
}
