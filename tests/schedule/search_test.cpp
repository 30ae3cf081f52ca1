#include "schedule/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "schedule/lower.h"
#include "schedule/named_configs.h"
#include "schedule/plan.h"
#include "schedule/validate.h"

namespace megasched::schedule {
namespace {

// The registry's toy preset and H100 target: the search sees what a user's search sees.
ModelShape toy_like() { return *find_preset("toy"); }

GpuTarget h100_like() { return *find_target("h100"); }

TEST(SearchMoves, RandomConfigsFitAndCoverManyValues) {
  std::mt19937_64 rng(7);
  std::set<std::string> seen;
  for (int i = 0; i < 300; ++i) {
    auto c = random_config(toy_like(), h100_like(), rng);
    std::string why;
    EXPECT_TRUE(config_fits(c, toy_like(), h100_like(), &why)) << why;
    seen.insert(canonical_string(c));
  }
  EXPECT_GT(seen.size(), 290u);
}

TEST(SearchMoves, RandomConfigIsDeterministicInTheSeed) {
  std::mt19937_64 a(3), b(3);
  EXPECT_EQ(random_config(toy_like(), h100_like(), a), random_config(toy_like(), h100_like(), b));
}

TEST(SearchMoves, NeighboursDifferInExactlyOneKnob) {
  auto n = neighbours(ScheduleConfig{}, toy_like(), h100_like());
  EXPECT_GT(n.size(), 30u);
  for (const auto& c : n) EXPECT_EQ(changed_knobs(ScheduleConfig{}, c).size(), 1u);
}

/// The config of a file under dev/configs, or nullopt with *why.
std::optional<ScheduleConfig> dev_config(const std::string& name, std::string* why) {
  std::ifstream in(std::string(MS_SOURCE_DIR) + "/dev/configs/" + name);
  if (!in) {
    *why = "cannot read dev/configs/" + name;
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_config_text(text.str(), why);
}

// A move that needs more staging room than a registers build's pages hold comes with the fewest
// more pages that fit (one move, not two): from the H200's position-0 record as it ran before
// kernel.silu_stage (two pages of 16 KiB, registers), copies arrives with four pages at llama-1b
// (8 x ffn = 64 KiB), never fewer: the record's position-0 config of 2026-11-29 [Q]
// (dev/configs/search_h200_p0_pages4_silu_copies.json); every neighbour still differs in one
// knob, or in that knob and smem.pages upward; the ring's pages are never moved so (there they
// size the ring).
TEST(SearchMoves, NeighboursBringThePagesAMoveNeeds) {
  std::string why;
  auto record = dev_config("search_h200_p0_pages4_silu_copies.json", &why);
  ASSERT_TRUE(record.has_value()) << why;
  const ScheduleConfig now = *record;
  ASSERT_EQ(record->smem.pages, 4);
  ASSERT_EQ(record->kernel.silu_stage, SiluStage::kCopies);
  record->smem.pages = 2;
  record->kernel.silu_stage = SiluStage::kRegisters;
  bool reaches_the_record = false;
  const ModelShape llama = *find_preset("llama-1b");
  const GpuTarget h200 = *find_target("h200");
  int copies = 0;
  for (const ScheduleConfig& c : neighbours(*record, llama, h200)) {
    const std::vector<std::string> moved = changed_knobs(*record, c);
    ASSERT_FALSE(moved.empty());
    if (moved.size() == 2) {
      EXPECT_EQ(std::count(moved.begin(), moved.end(), "smem.pages"), 1) << canonical_string(c);
      EXPECT_GT(c.smem.pages, record->smem.pages) << canonical_string(c);
    } else {
      EXPECT_EQ(moved.size(), 1u) << canonical_string(c);
    }
    if (c.kernel.silu_stage == SiluStage::kCopies) {
      ++copies;
      EXPECT_EQ(std::set<std::string>(moved.begin(), moved.end()),
                (std::set<std::string>{"kernel.silu_stage", "smem.pages"}));
      EXPECT_EQ(c.smem.pages, 4);
      EXPECT_TRUE(config_fits(c, llama, h200, &why)) << why;
      reaches_the_record = reaches_the_record || c == now;
    }
  }
  EXPECT_EQ(copies, 1);
  EXPECT_TRUE(reaches_the_record);
  ScheduleConfig ring = *record;
  ring.kernel.weight_stream = WeightStream::kSmemRing;
  ring.fusion.attention_into_o = false;
  ring.tiling.qkv_rope_pairs = false;
  ring.kernel.stream_held = 0;
  for (const ScheduleConfig& c : neighbours(ring, llama, h200)) {
    if (c.kernel.weight_stream == WeightStream::kSmemRing) {
      EXPECT_LE(changed_knobs(ring, c).size(), 1u) << canonical_string(c);
    }
  }
}

// The search's moves come from the knob table, so they see smem.inflight_pages where it lowers:
// a ring of 4 pages has the caps 1-3 as neighbours, a registers build none; a capped ring's
// neighbours keep the cap below the pages and the ring on.
TEST(SearchMoves, NeighboursMoveTheRingsInflightCapBelowItsPages) {
  for (const ScheduleConfig& c : neighbours(ScheduleConfig{}, toy_like(), h100_like()))
    EXPECT_EQ(c.smem.inflight_pages, 0) << canonical_string(c);
  ScheduleConfig ring;
  ring.kernel.weight_stream = WeightStream::kSmemRing;
  ring.smem.pages = 4;
  std::vector<ScheduleConfig> n = neighbours(ring, toy_like(), h100_like());
  std::set<int> moved;
  for (const ScheduleConfig& c : n)
    if (changed_knobs(ring, c) == std::vector<std::string>{"smem.inflight_pages"})
      moved.insert(c.smem.inflight_pages);
  EXPECT_EQ(moved, (std::set<int>{1, 2, 3}));
  ring.smem.inflight_pages = 3;
  n = neighbours(ring, toy_like(), h100_like());
  EXPECT_FALSE(n.empty());
  for (const ScheduleConfig& c : n) {
    EXPECT_TRUE(c.smem.inflight_pages == 0 || c.smem.inflight_pages < c.smem.pages)
        << canonical_string(c);
    EXPECT_TRUE(c.smem.inflight_pages == 0 || c.kernel.weight_stream == WeightStream::kSmemRing)
        << canonical_string(c);
  }
  // Random configs draw it too.
  std::mt19937_64 rng(5);
  std::set<int> drawn;
  for (int i = 0; i < 200; ++i)
    drawn.insert(random_config(toy_like(), h100_like(), rng).smem.inflight_pages);
  EXPECT_EQ(drawn, (std::set<int>{0, 1, 2, 3, 4}));
}

// kernel.stream_depth, the ring cap's mirror: only the registers stream has chunks in flight to
// deepen, so the default config moves to depths 3 and 4, the weight ring to none, a deeper stream
// never to the ring; random configs draw every depth, and depth 2 beside every ring.
TEST(SearchMoves, NeighboursMoveTheStreamDepthOnlyWithTheRegistersStream) {
  std::set<int> moved;
  for (const ScheduleConfig& c : neighbours(ScheduleConfig{}, toy_like(), h100_like()))
    if (changed_knobs(ScheduleConfig{}, c) == std::vector<std::string>{"kernel.stream_depth"})
      moved.insert(c.kernel.stream_depth);
  EXPECT_EQ(moved, (std::set<int>{3, 4}));
  ScheduleConfig ring;
  ring.kernel.weight_stream = WeightStream::kSmemRing;
  for (const ScheduleConfig& c : neighbours(ring, toy_like(), h100_like()))
    EXPECT_TRUE(c.kernel.stream_depth == 2 || c.kernel.weight_stream == WeightStream::kRegisters)
        << canonical_string(c);
  ScheduleConfig deep;
  deep.kernel.stream_depth = 3;
  const std::vector<ScheduleConfig> n = neighbours(deep, toy_like(), h100_like());
  EXPECT_FALSE(n.empty());
  for (const ScheduleConfig& c : n)
    EXPECT_TRUE(c.kernel.weight_stream == WeightStream::kRegisters || c.kernel.stream_depth == 2)
        << canonical_string(c);
  std::mt19937_64 rng(5);
  std::set<int> drawn;
  for (int i = 0; i < 200; ++i) {
    const ScheduleConfig c = random_config(toy_like(), h100_like(), rng);
    drawn.insert(c.kernel.stream_depth);
    EXPECT_TRUE(c.kernel.stream_depth == 2 || c.kernel.weight_stream == WeightStream::kRegisters)
        << canonical_string(c);
  }
  EXPECT_EQ(drawn, (std::set<int>{2, 3, 4}));
}

// A knob that acts only under another knob's value (smem.inflight_pages: only with the weight
// ring; kernel.stream_depth and kernel.stream_held: only without it, the held chunks at most the
// depth; kernel.stream_held_every: only with chunks held; fusion.combine_into_o: only with KV
// partitions) is
// drawn last, among the values the rest allows, so it does not tilt the other knob's draw: the
// weight ring comes up as often as when these knobs are left at their defaults (rejecting whole
// configs made the cap's share 40%, and a deeper stream, refused beside 2 of 3 rings, would cut
// the ring's share by about two thirds).
TEST(SearchMoves, RandomConfigsDrawConditionalKnobsWithoutTiltingTheirParents) {
  const ModelShape llama = *find_preset("llama-1b");
  const GpuTarget target = h100_like();
  std::mt19937_64 rng(9);
  int rings = 0, capped = 0, partitioned = 0, combined = 0, deep = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const ScheduleConfig c = random_config(llama, target, rng);
    const bool ring = c.kernel.weight_stream == WeightStream::kSmemRing;
    rings += ring;
    capped += c.smem.inflight_pages > 0;
    EXPECT_TRUE(ring || c.smem.inflight_pages == 0) << canonical_string(c);
    EXPECT_TRUE(!ring || c.kernel.stream_depth == 2) << canonical_string(c);
    deep += c.kernel.stream_depth > 2;
    partitioned += c.tiling.attn_kv_partitions > 1;
    combined += c.fusion.combine_into_o;
  }
  // The reference: the same draw with the conditional knobs left at their defaults.
  std::mt19937_64 ref_rng(9);
  int ref_rings = 0;
  for (int i = 0; i < n; ++i) {
    ScheduleConfig c;
    for (;;) {
      c = ScheduleConfig{};
      for (const KnobSpec& spec : knob_specs()) {
        if (spec.path == "smem.inflight_pages" || spec.path == "kernel.stream_depth" ||
            spec.path == "kernel.stream_held" || spec.path == "kernel.stream_held_every" ||
            spec.path == "fusion.combine_into_o")
          continue;
        std::vector<nlohmann::json> fit;
        for (const auto& v : spec.choices)
          if (knob_value_fits(spec.path, v, llama)) fit.push_back(v);
        std::uniform_int_distribution<size_t> pick(0, fit.size() - 1);
        set_knob(&c, spec.path, fit[pick(ref_rng)], nullptr);
      }
      if (config_fits(c, llama, target)) break;
    }
    ref_rings += c.kernel.weight_stream == WeightStream::kSmemRing;
  }
  EXPECT_NEAR(double(rings) / n, double(ref_rings) / n, 0.04) << rings << " vs " << ref_rings;
  EXPECT_LT(double(rings) / n, 0.30);
  EXPECT_GT(capped, rings / 3);           // most rings of 2+ pages draw a cap
  EXPECT_GT(deep, (n - rings) / 2);       // two thirds of the registers draws are deeper
  EXPECT_GT(combined, partitioned / 10);  // it also needs the registers stream and no K split
  EXPECT_LE(combined, partitioned);
}

TEST(SearchMoves, WeightRingSmemHoldsPagesStagingAndBarriers) {
  const ModelShape llama = *find_preset("llama-1b");
  ScheduleConfig c;
  c.smem.pages = 4;
  c.smem.page_bytes = 32768;
  EXPECT_EQ(dynamic_smem_bytes(c, llama), 4 * 32768);
  c.kernel.weight_stream = WeightStream::kSmemRing;
  EXPECT_EQ(ring_x_floats(llama), 8192) << "the down projection reads ffn = 8192 columns";
  EXPECT_EQ(dynamic_smem_bytes(c, llama), 4 * 32768 + 8192 * 4 + 4 * 16);
  std::string why;
  EXPECT_TRUE(config_fits(c, llama, h100_like(), &why)) << why;
  c.smem.pages = 8;  // 256 KiB of pages: over the opt-in cap
  EXPECT_FALSE(config_fits(c, llama, h100_like(), &why));
  c.smem.pages = 4;
  c.assignment.policy = AssignPolicy::kDynamic;
  EXPECT_FALSE(config_fits(c, llama, h100_like(), &why));
  EXPECT_NE(why.find("static queues"), std::string::npos) << why;
}

TEST(SearchMoves, CommittedBenchConfigsAndNamedConfigsParseAndFit) {
  const ModelShape llama = *find_preset("llama-1b");
  const GpuTarget h200 = *find_target("h200");
  // The committed config files: those tests/data/golden_configs.txt lists (bench/configs/, the
  // named ones, and the one-offs of dev/configs/).
  int files = 0;
  std::ifstream list(std::string(MS_SOURCE_DIR) + "/tests/data/golden_configs.txt");
  std::string path;
  while (std::getline(list, path)) {
    if (path.empty() || path[0] == '#') continue;
    std::ifstream in(std::string(MS_SOURCE_DIR) + "/" + path);
    ASSERT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    std::string why;
    const auto c = parse_config_text(text.str(), &why);
    ASSERT_TRUE(c) << path << ": " << why;
    EXPECT_TRUE(config_fits(*c, llama, h200, &why)) << path << ": " << why;
    ++files;
  }
  EXPECT_GE(files, 3);
  for (const NamedConfig& n : named_configs()) {
    std::string why;
    const auto plan = parse_plan(n.config, &why);  // a config is the one-bucket plan
    ASSERT_TRUE(plan) << n.name << ": " << why;
    const ModelShape shape = *find_preset(n.model);
    EXPECT_TRUE(check_plan_covers(*plan, shape.max_seq, &why)) << n.name << ": " << why;
    for (const PlanBucket& b : plan->buckets)
      EXPECT_TRUE(config_fits(b.config, shape, *find_target(n.gpu), &why))
          << n.name << " bucket " << bucket_label(b) << ": " << why;
  }
}

// The llama-1b records are the plans `bench --fit-plan` wrote on each GPU (bench/plans/), bucket
// for bucket: the name and the measured file cannot drift apart.
// named_config_at: a named plan's config at a position is its bucket's there; an unknown name
// says which names exist.
TEST(NamedConfigs, AtAPositionIsThePlansBucketThere) {
  for (const char* gpu : {"h100", "h200"}) {
    const std::string name = std::string("best:llama-1b:") + gpu;
    const auto plan = parse_plan(find_named_config(name, nullptr)->config, nullptr);
    ASSERT_TRUE(plan) << name;
    ASSERT_GE(plan->buckets.size(), 2u) << name;
    for (const PlanBucket& b : plan->buckets) {
      std::string why;
      const auto at = named_config_at(name, b.begin, &why);
      ASSERT_TRUE(at) << name << ": " << why;
      EXPECT_EQ(*at, b.config) << name << " at " << b.begin;
    }
  }
  std::string why;
  EXPECT_FALSE(named_config_at("best:llama-1b:a100", 0, &why));
  EXPECT_NE(why.find("best:llama-1b:h200"), std::string::npos) << why;
}

TEST(SearchMoves, TheLlamaRecordsAreTheCommittedFittedPlans) {
  for (const char* gpu : {"h100", "h200"}) {
    const std::string name = std::string("best:llama-1b:") + gpu;
    const auto named = find_named_config(name, nullptr);
    ASSERT_TRUE(named) << name;
    std::string why;
    const auto preset = parse_plan(named->config, &why);
    ASSERT_TRUE(preset) << name << ": " << why;
    const std::string path =
        std::string(MS_SOURCE_DIR) + "/bench/plans/llama-1b-" + gpu + "-fitted.json";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    const auto fitted = parse_plan_text(text.str(), &why);
    ASSERT_TRUE(fitted) << path << ": " << why;
    EXPECT_EQ(to_json(*preset), to_json(*fitted)) << name;
    EXPECT_EQ(preset->buckets.size(), std::string(gpu) == "h200" ? 6u : 3u) << name;
  }
}

// The H200 record's first bucket is what a loop from the default config kept
// (dev/configs/search_h200_p0_r4_attn_in_o.json), with what a loop from the record then kept
// (kernel.stream_held 1 and LM-head tiles of 512 rows:
// dev/configs/search_h200_p0_loop_held1_every2.json, the file the loop's best was saved as), down's
// input copied into shared memory in the four pages that takes
// (dev/configs/search_h200_p0_pages4_silu_copies.json), and what `loop --confirm 3` from the config
// without the copies kept on top of them (two chunks held on every fourth block, five pages, one
// LM-head tile a block: dev/configs/search_h200_p1_loop_confirm_held2_every4.json), on the
// positions `bench --fit-plan` gave it: [0, 4), where its line is below the others'; from position
// 4 on, whose O tiles read more keys each, what `loop --plan` kept in the bucket [3, 62) at its
// midpoint (four rows, one chunk held on every fourth block), up to 65.
TEST(SearchMoves, TheH200RecordsFirstBucketIsTheLoopsFind) {
  std::string why;
  const auto found = dev_config("search_h200_p0_loop_held1_every2.json", &why);
  ASSERT_TRUE(found) << why;
  const auto copies = dev_config("search_h200_p0_pages4_silu_copies.json", &why);
  ASSERT_TRUE(copies) << why;
  const auto confirmed = dev_config("search_h200_p1_loop_confirm_held2_every4.json", &why);
  ASSERT_TRUE(confirmed) << why;
  const auto p32 = dev_config("search_h200_p32_plansearch_r4_held1_every4.json", &why);
  ASSERT_TRUE(p32) << why;
  const auto at0 = named_config_at("best:llama-1b:h200", 0, &why);
  const auto at3 = named_config_at("best:llama-1b:h200", 3, &why);
  const auto at4 = named_config_at("best:llama-1b:h200", 4, &why);
  const auto at64 = named_config_at("best:llama-1b:h200", 64, &why);
  const auto at65 = named_config_at("best:llama-1b:h200", 65, &why);
  ASSERT_TRUE(at0 && at3 && at4 && at64 && at65) << why;
  EXPECT_EQ(*at0, *confirmed);
  EXPECT_EQ(*at3, *confirmed);
  // The copies config is the loop's find with two knobs moved, nothing else; the confirmed find
  // is the copies config with four more.
  ScheduleConfig moved = *found;
  moved.kernel.silu_stage = SiluStage::kCopies;
  moved.smem.pages = 4;
  EXPECT_EQ(moved, *copies);
  moved.kernel.stream_held = 2;
  moved.kernel.stream_held_every = 4;
  moved.smem.pages = 5;
  moved.tiling.lm_head_rows_per_task = 0;
  EXPECT_EQ(moved, *confirmed);
  EXPECT_TRUE(at0->fusion.attention_into_o);
  EXPECT_FALSE(at4->fusion.attention_into_o);
  EXPECT_EQ(*at4, *p32);
  EXPECT_EQ(*at64, *p32);
  EXPECT_NE(*at65, *p32);
  EXPECT_EQ(p32->kernel.rows_per_warp, 4);
  EXPECT_EQ(p32->kernel.stream_held, 1);
  EXPECT_EQ(p32->kernel.stream_held_every, 4);
  EXPECT_FALSE(p32->fusion.attention_into_o);
}

// The H200 record's long-context config is what a loop from the record kept at position 4096
// (dev/configs/search_h200_p4096_loop_d3_held3_every2.json), on the bucket the lower envelope of
// the measured lines gave it: from 1112 on. Before it, [65, 370) holds what a loop from the
// record kept at position 256 (dev/configs/search_h200_p256_loop_kv1.json: the same config with
// the KV history in one partition), [667, 1112) the staged attention in 8 partitions at three
// rows a warp with one chunk held, what `loop --plan` kept in its bucket at the midpoint 660
// (dev/configs/search_h200_p660_plansearch_r3_held1.json; its line lowest around position 512),
// and [370, 667) the same in two pages, what a second `loop --plan` kept at 744
// (dev/configs/search_h200_p744_plansearch_staged_pages2.json).
TEST(SearchMoves, TheH200RecordsLongContextBucketsAreTheLoopsFinds) {
  std::string why;
  const auto found = dev_config("search_h200_p4096_loop_d3_held3_every2.json", &why);
  ASSERT_TRUE(found) << why;
  const auto middle = dev_config("search_h200_p256_loop_kv1.json", &why);
  ASSERT_TRUE(middle) << why;
  const auto staged = dev_config("search_h200_p660_plansearch_r3_held1.json", &why);
  ASSERT_TRUE(staged) << why;
  const auto staged2 = dev_config("search_h200_p744_plansearch_staged_pages2.json", &why);
  ASSERT_TRUE(staged2) << why;
  const auto expect_at = [&](std::initializer_list<int> positions, const ScheduleConfig& c) {
    for (int pos : positions) {
      const auto at = named_config_at("best:llama-1b:h200", pos, &why);
      ASSERT_TRUE(at) << why;
      EXPECT_EQ(*at, c) << pos;
    }
  };
  expect_at({1112, 4096, 8191}, *found);
  expect_at({65, 256, 369}, *middle);
  expect_at({370, 512, 666}, *staged2);
  expect_at({667, 1024, 1111}, *staged);
  for (int pos : {64, 369}) {
    const auto at = named_config_at("best:llama-1b:h200", pos, &why);
    ASSERT_TRUE(at) << why;
    EXPECT_NE(*at, *found) << pos;
    EXPECT_NE(*at, *staged) << pos;
  }
  const auto at64 = named_config_at("best:llama-1b:h200", 64, &why);
  ASSERT_TRUE(at64) << why;
  EXPECT_NE(*at64, *middle);
  EXPECT_EQ(found->kernel.stream_depth, 3);
  EXPECT_EQ(found->kernel.stream_held, 3);
  EXPECT_EQ(middle->tiling.attn_kv_partitions, 1);
  EXPECT_EQ(staged->tiling.attn_kv_partitions, 8);
  EXPECT_EQ(staged->kernel.rows_per_warp, 3);
  EXPECT_EQ(staged->kernel.stream_held, 1);
  // Each loop changed one knob of its bucket's config, nothing else.
  ScheduleConfig one_partition = *found;
  one_partition.tiling.attn_kv_partitions = 1;
  EXPECT_EQ(one_partition, *middle);
  ScheduleConfig two_pages = *staged;
  two_pages.smem.pages = 2;
  EXPECT_EQ(two_pages, *staged2);
}

TEST(SearchMoves, ConfigFitsRejectsLaunchesThatCannotBeCoResident) {
  ScheduleConfig c;
  c.launch.threads_per_block = 1024;
  c.launch.blocks_per_sm = 4;
  std::string why;
  EXPECT_FALSE(config_fits(c, toy_like(), h100_like(), &why));
  EXPECT_NE(why.find("threads per SM"), std::string::npos) << why;
  c = ScheduleConfig{};
  c.smem.pages = 8;
  c.smem.page_bytes = 32768;
  EXPECT_FALSE(config_fits(c, toy_like(), h100_like(), &why));
  EXPECT_NE(why.find("opt-in cap"), std::string::npos) << why;
}

TEST(SearchMoves, ConfigFitsRejectsQHeadsThatDoNotDivideTheGroup) {
  ScheduleConfig c;
  c.tiling.attn_q_heads_per_task = 4;  // group is 2
  std::string why;
  EXPECT_FALSE(config_fits(c, toy_like(), h100_like(), &why));
  EXPECT_NE(why.find("tiling.attn_q_heads_per_task"), std::string::npos) << why;
}

TEST(SearchMoves, ConfigFitsAndTheValidatorAgreeOnEveryLaunchShape) {
  // The search proposes exactly the launches the validator lets run (schedule/launch_fit.h).
  const ModelShape shape = toy_like();
  const GpuTarget target = h100_like();
  for (int threads : {128, 256, 384, 512, 1024}) {
    for (int blocks : {1, 2, 3, 4}) {
      for (int pages : {1, 8}) {
        ScheduleConfig c;
        c.launch.threads_per_block = threads;
        c.launch.blocks_per_sm = blocks;
        c.smem.pages = pages;
        c.smem.page_bytes = 32768;
        std::string error;
        const std::optional<Program> p = lower(shape, target, c, &error);
        ASSERT_TRUE(p) << error;
        EXPECT_EQ(config_fits(c, shape, target), validate(*p, target).ok())
            << threads << " threads x " << blocks << " blocks, " << pages << " pages";
      }
    }
  }
}

TEST(SearchMoves, MutateChangesRequestedNumberOfKnobsAtMost) {
  std::mt19937_64 rng(1);
  auto m = mutate(ScheduleConfig{}, toy_like(), h100_like(), rng, 1);
  EXPECT_EQ(changed_knobs(ScheduleConfig{}, m).size(), 1u);
}

// llama-8b's record on an H200 is what a 6.5-minute loop at llama-8b kept from the staged config
// (dev/configs/search_h200_llama8b_p0_loop.json, dev/perf_log.md section 53), promoted against the
// default: one config for every position, not a plan.
TEST(SearchMoves, TheLlama8bH200RecordIsTheLoopsFind) {
  std::string why;
  const auto found = dev_config("search_h200_llama8b_p0_loop.json", &why);
  ASSERT_TRUE(found) << why;
  const auto named = find_named_config("best:llama-8b:h200", &why);
  ASSERT_TRUE(named) << why;
  EXPECT_EQ(named->model, "llama-8b");
  EXPECT_EQ(named->gpu, "h200");
  for (int pos : {0, 4096}) {
    const auto at = named_config_at("best:llama-8b:h200", pos, &why);
    ASSERT_TRUE(at) << why;
    EXPECT_EQ(*at, *found) << pos;
  }
}

}  // namespace
}  // namespace megasched::schedule
