// zs-study: the gradient-sync and scaling studies (study/cli.h).
#include "study/cli.h"

int main(int argc, char** argv) { return zs::study::study_main(argc, argv); }
