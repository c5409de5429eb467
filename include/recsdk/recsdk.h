// recsdk/recsdk.h: the umbrella header; includes the whole public API.
#ifndef RECSDK_RECSDK_H_
#define RECSDK_RECSDK_H_

#include "recsdk/checkpoint.h"
#include "recsdk/config.h"
#include "recsdk/dataset.h"
#include "recsdk/dtype.h"
#include "recsdk/embedding.h"
#include "recsdk/export.h"
#include "recsdk/feature_spec.h"
#include "recsdk/gradients.h"
#include "recsdk/graph.h"
#include "recsdk/initializers.h"
#include "recsdk/layers.h"
#include "recsdk/metrics.h"
#include "recsdk/observer.h"
#include "recsdk/ops.h"
#include "recsdk/optimizers.h"
#include "recsdk/pipeline.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/shape.h"
#include "recsdk/sparse_optimizers.h"
#include "recsdk/status.h"
#include "recsdk/table.h"
#include "recsdk/tensor.h"
#include "recsdk/variables.h"
#include "recsdk/version.h"

#endif  // RECSDK_RECSDK_H_
