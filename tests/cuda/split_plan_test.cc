// Launch geometry of the split-K attention kernels: enough blocks to fill the GPU at small
// batch, none at large batch, and never more shared memory per block than a launch may use
// (the abc head with thousands of slots that used to fail at launch). Host-only: runs in every
// build, GPU or not.
#include "engine/attention/split_plan.h"

#include <gtest/gtest.h>

namespace abcd::cuda {
namespace {

constexpr int kSms = 132;  // an H100 SXM

TEST(SplitPlanTest, LargeBatchDoesNotSplit) {
  absl::StatusOr<SplitPlan> plan = PlanSplits("abc", 64, 256 * 8, kSms, 4, 1000);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 1);
  EXPECT_EQ(plan->chunk, 64);
}

TEST(SplitPlanTest, SplitBlocksCountsAScansLongestRun) {
  EXPECT_EQ(SplitBlocks(64, 8, 1), 512);     // decode: rows x heads
  EXPECT_EQ(SplitBlocks(64, 8, 16), 32);     // a scan: divided by the longest run
  EXPECT_EQ(SplitBlocks(1, 8, 2048), 8);     // never fewer than the heads
  EXPECT_EQ(SplitBlocks(3000, 4, 2), 6000);  // many short runs still fill the grid
}

TEST(SplitPlanTest, SmallBatchSplitsToFillTheGpuWithinMinChunk) {
  // batch 1 x 8 heads = 8 blocks; 2 x 132 wanted -> 33 splits, but at most 64 / 4 = 16.
  absl::StatusOr<SplitPlan> plan = PlanSplits("abc", 64, 8, kSms, 4, 1000);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 16);
  EXPECT_EQ(plan->chunk, 4);
  // 32k cached tokens at batch 1 x 4 heads: 66 splits of 497 tokens.
  plan = PlanSplits("softmax", 32768, 4, kSms, 64, 512);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 66);
  EXPECT_LE(plan->chunk, 512);
  EXPECT_GE(int64_t{plan->splits} * plan->chunk, 32768);
  EXPECT_LT(int64_t{plan->splits - 1} * plan->chunk, 32768);  // the last split is not empty
}

TEST(SplitPlanTest, SharedMemoryCapsTheChunkEvenAtLargeBatch) {
  // abc, dh 128 (vec 4: 4 value groups): 3*128 + 4*128 + 2 fixed floats, 2 per slot.
  const int64_t max_chunk = MaxChunkForSharedMemory(3 * 128 + 4 * 128 + 2, 2);
  EXPECT_EQ(max_chunk, (48 * 1024 / 4 - 898) / 2);
  absl::StatusOr<SplitPlan> plan = PlanSplits("abc", 6000, 4096, kSms, 4, max_chunk);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 2);
  EXPECT_LE(plan->chunk, max_chunk);
  EXPECT_LE(4 * (898 + 2 * plan->chunk), kDefaultSharedMemoryBytes);
}

TEST(SplitPlanTest, EverySplitIsNonEmpty) {
  for (int64_t items = 1; items <= 300; ++items) {
    for (int64_t blocks : {1, 3, 50, 400}) {
      absl::StatusOr<SplitPlan> plan = PlanSplits("linear", items, blocks, kSms, 8, 37);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_LE(plan->chunk, 37);
      EXPECT_GE(int64_t{plan->splits} * plan->chunk, items) << items << " " << blocks;
      EXPECT_LT(int64_t{plan->splits - 1} * plan->chunk, items) << items << " " << blocks;
    }
  }
}

TEST(SplitPlanTest, RefusesShapesNoLaunchCanHoldNamingTheKernel) {
  EXPECT_EQ(MaxChunkForSharedMemory(48 * 1024, 2), 0);
  absl::StatusOr<SplitPlan> plan = PlanSplits("abc", 64, 8, kSms, 4, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("abc"), std::string::npos);
  EXPECT_NE(plan.status().message().find("shared memory"), std::string::npos);

  plan = PlanSplits("softmax", int64_t{70000} * 2, 1, kSms, 1, 2);  // 70000 splits > 65535
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("65535"), std::string::npos);

  EXPECT_TRUE(CheckGridRows("abc", 65535).ok());
  const absl::Status rows = CheckGridRows("abc", 65536);
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("65536 rows"), std::string::npos);
}

// Softmax graphs: a step replays the smallest context bucket that holds its longest context
// (its own token included); the last bucket is max_context, which Validate never exceeds.
TEST(SplitPlanTest, GraphContextBuckets) {
  EXPECT_EQ(GraphContextBuckets(700), (std::vector<int64_t>{256, 512, 700}));
  EXPECT_EQ(GraphContextBuckets(512), (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(GraphContextBuckets(128), (std::vector<int64_t>{128}));
  EXPECT_EQ(GraphContextBuckets(8192), (std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192}));
  const std::vector<int64_t> buckets = GraphContextBuckets(700);
  EXPECT_EQ(GraphContextIndex(buckets, 1), 0u);
  EXPECT_EQ(GraphContextIndex(buckets, 256), 0u);  // position 255 plus its own token
  EXPECT_EQ(GraphContextIndex(buckets, 257), 1u);
  EXPECT_EQ(GraphContextIndex(buckets, 512), 1u);
  EXPECT_EQ(GraphContextIndex(buckets, 513), 2u);
  EXPECT_EQ(GraphContextIndex(buckets, 700), 2u);
  EXPECT_EQ(GraphContextIndex({0}, 5), 0u);  // bounded models: one bucket
}

}  // namespace
}  // namespace abcd::cuda
