// The synthetic entailment set (study/synthetic_data.h).
#include "study/synthetic_data.h"

#include <fstream>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace zs::study {
namespace {

const char* const kSubjects[] = {"the teacher", "a farmer",  "the doctor", "my neighbour",
                                 "the pilot",   "a student", "the baker",  "the mayor"};
const char* const kVerbs[] = {"painted", "repaired", "sold", "carried", "bought", "cleaned"};
const char* const kAdjectives[] = {"old", "red", "small", "heavy", "new", "wooden"};
const char* const kObjects[] = {"boat", "fence", "table", "bicycle", "piano", "door"};
const char* const kPlaces[] = {"in the village", "near the river", "at the market",
                               "behind the school", "in the harbour"};

template <size_t N>
const char* pick(const char* const (&words)[N], uint64_t seed, const char* what, uint64_t index,
                 uint64_t avoid = N) {
  uint64_t k = random_bits(rng_key(seed, what, 0), index) % N;
  if (k == avoid) k = (k + 1) % N;
  return words[k];
}

// "painted" -> "paint": the verbs above are regular pasts in -ed, but for three.
std::string base_form(const std::string& past) {
  if (past == "sold") return "sell";
  if (past == "bought") return "buy";
  if (past == "carried") return "carry";
  return past.substr(0, past.size() - 2);
}

template <size_t N>
uint64_t index_of(const char* const (&words)[N], const char* word) {
  for (uint64_t i = 0; i < N; ++i) {
    if (words[i] == word) return i;
  }
  return N;
}

}  // namespace

std::string entailment_line(uint64_t seed, uint64_t index) {
  const char* subject = pick(kSubjects, seed, "subject", index);
  const char* verb = pick(kVerbs, seed, "verb", index);
  const char* adjective = pick(kAdjectives, seed, "adjective", index);
  const char* object = pick(kObjects, seed, "object", index);
  const char* place = pick(kPlaces, seed, "place", index);
  const std::string premise =
      std::string(subject) + " " + verb + " the " + adjective + " " + object + " " + place;
  const bool entailed = random_bits(rng_key(seed, "label", 0), index) % 2 == 0;
  const uint64_t form = random_bits(rng_key(seed, "form", 0), index) % 3;
  std::string hypothesis;
  if (entailed) {
    // A part of the premise, restated.
    hypothesis = form == 0   ? std::string(subject) + " " + verb + " the " + object
                 : form == 1 ? std::string("the ") + object + " was " + verb + " " + place
                             : std::string(subject) + " " + verb + " something " + place;
  } else {
    // One fact changed.
    if (form == 0) {
      hypothesis =
          std::string(pick(kSubjects, seed, "other subject", index, index_of(kSubjects, subject))) +
          " " + verb + " the " + object;
    } else if (form == 1) {
      hypothesis = std::string(subject) + " did not " + base_form(verb) + " the " + object;
    } else {
      hypothesis = std::string(subject) + " " + verb + " something " +
                   pick(kPlaces, seed, "other place", index, index_of(kPlaces, place));
    }
  }
  return premise + " | " + hypothesis + "\t" + (entailed ? "entailment" : "not_entailment") + "\n";
}

void write_entailment_tsv(const std::string& path, int64_t examples, uint64_t seed) {
  std::ofstream out(path, std::ios::trunc);
  for (int64_t i = 0; i < examples; ++i) out << entailment_line(seed, static_cast<uint64_t>(i));
  out.close();
  ZS_CHECK_AS(IoError, out.good(), "cannot write the study's data set ", path,
              "; give --work-dir a writable directory");
}

}  // namespace zs::study
