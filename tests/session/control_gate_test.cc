// control_gate_test.cc: the executor's skip rule for ControlGate (src/session/session.cc,
// src/graph/ops/precision_ops.cc), which dynamic loss scaling relies on: with a false condition,
// a node with a control input from the gate does not run, nor its data consumers; a node that
// only takes a control input from a skipped node still runs; fetching a skipped value is an error
// naming the gate; with a true condition everything runs. At 1 and 2 inter-op streams.
#include <gtest/gtest.h>

#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

TEST(ControlGateTest, FalseConditionSkipsGatedNodesAndTheirConsumers) {
  for (const char* streams : {"", "DNN_V100:2"}) {
    Graph g;
    Scope s(&g);
    Output pred = ops::Placeholder(s.WithOpName("pred"), DType::kBool, Shape{});
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{});
    Node* gate = s.WithOpName("gate").AddNode("ControlGate", {pred});
    VariableOptions vo;
    vo.initializer = Initializer::Zeros();
    vo.trainable = false;
    Variable count = Variable::Make(s, "count", Shape{}, vo);
    Node* bump =
        AssignAdd(s.WithControlDependencies({gate}).WithOpName("bump"), count, ops::Const(s, 1.0f));
    Output y = ops::Add(s.WithControlDependencies({gate}).WithOpName("y"), x, ops::Const(s, 1.0f));
    ops::Mul(s.WithOpName("z"), y, ops::Const(s, 2.0f));
    ops::Identity(s.WithControlDependencies({y.node}).WithOpName("after"), x);
    Node* init = GlobalVariablesInitializer(s);
    ASSERT_TRUE(s.ok()) << s.status();
    SessionConfig c;
    c.stream_max_parallel_num = streams;
    auto session = *Session::Create(g, c);
    ASSERT_TRUE(session->Run({}, {}, {init->name()}).ok());
    auto feeds = [](bool p) {
      return FeedList{{"pred", Tensor::Scalar<bool>(p)}, {"x", Tensor::Scalar<float>(3.0f)}};
    };
    auto open = session->Run(feeds(true), {"z", "after"}, {bump->name()});
    ASSERT_TRUE(open.ok()) << open.status();
    EXPECT_EQ((*open)[0].data<float>()[0], 8.0f);
    EXPECT_EQ((*open)[1].data<float>()[0], 3.0f);

    auto closed = session->Run(feeds(false), {"after"}, {bump->name(), "z"});
    ASSERT_TRUE(closed.ok()) << closed.status();  // the control-only dependent ran
    EXPECT_EQ((*closed)[0].data<float>()[0], 3.0f);
    auto skipped = session->Run(feeds(false), {"z"}, {});
    ASSERT_EQ(skipped.status().code(), absl::StatusCode::kFailedPrecondition) << streams;
    EXPECT_NE(skipped.status().message().find("ControlGate"), std::string_view::npos);

    auto value = session->Run({}, {"count/read"}, {});
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_EQ((*value)[0].data<float>()[0], 1.0f) << "the gated update ran once, in the open step";
  }
}

}  // namespace
}  // namespace recsdk
