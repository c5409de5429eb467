// scope.cc
#include "recsdk/scope.h"

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk {

std::string Scope::FullName(std::string_view name) const {
  if (prefix_.empty()) return std::string(name);
  return prefix_ + "/" + std::string(name);
}

std::string Scope::VariableName(std::string_view name) const {
  if (var_prefix_.empty()) return std::string(name);
  return var_prefix_ + "/" + std::string(name);
}

Scope Scope::NewSubScope(std::string_view name) const {
  Scope s = *this;
  s.prefix_ = graph_->UniqueName(FullName(name));
  // Without reuse, variables follow the (uniquified) op names as they always have; with reuse
  // they take the name as given, so rebuilding the same model names the same variables.
  s.var_prefix_ = reuse_ == VariableReuse::kNone ? s.prefix_ : VariableName(name);
  s.op_name_.clear();
  return s;
}

Scope Scope::NewNameScope(std::string_view name) const {
  Scope s = *this;
  s.prefix_ = graph_->UniqueName(FullName(name));
  if (reuse_ == VariableReuse::kNone) s.var_prefix_ = s.prefix_;
  s.op_name_.clear();
  return s;
}

Scope Scope::WithVariableReuse(VariableReuse reuse) const {
  Scope s = *this;
  s.reuse_ = reuse;
  return s;
}

Scope Scope::WithOpName(std::string_view name) const {
  Scope s = *this;
  s.op_name_ = std::string(name);
  return s;
}

Scope Scope::WithDevice(std::string_view device) const {
  Scope s = *this;
  s.device_ = std::string(device);
  return s;
}

Scope Scope::WithControlDependencies(std::vector<Node*> nodes) const {
  Scope s = *this;
  s.control_deps_.insert(s.control_deps_.end(), nodes.begin(), nodes.end());
  return s;
}

Node* Scope::AddNode(std::string_view op_type, std::vector<Output> inputs, AttrMap attrs,
                     std::string_view default_name) const {
  if (!graph_->status().ok()) return nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) {
      graph_->RecordError(absl::InvalidArgumentError(
          fmt::format("building a {} op under \"{}\": input {} is invalid (an earlier op failed?)",
                      op_type, prefix_, i)));
      return nullptr;
    }
  }
  const std::string_view base = !op_name_.empty()       ? std::string_view(op_name_)
                                : !default_name.empty() ? default_name
                                                        : op_type;
  NodeSpec spec;
  spec.name = graph_->UniqueName(FullName(base));
  spec.type = std::string(op_type);
  spec.inputs = std::move(inputs);
  spec.control_inputs = control_deps_;
  spec.attrs = std::move(attrs);
  spec.device = device_;
  auto node = graph_->AddNode(std::move(spec));
  if (!node.ok()) {
    graph_->RecordError(node.status());
    return nullptr;
  }
  return *node;
}

}  // namespace recsdk
