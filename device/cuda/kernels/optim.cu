// Optimizer steps, elementwise, operation for operation as device/cpu's
// optim.go (PyTorch's single-tensor update rules), in float32.
#include "common.cuh"

extern "C" __global__ void ferry_sgd_step(float* w, const float* g, float* buf, i64 n, float lr, float momentum,
                                          float dampening, float weight_decay, int nesterov, int first) {
  GRID_STRIDE_LOOP(i64, i, n) {
    float d = g[i];
    if (weight_decay != 0.0f) d += weight_decay * w[i];
    if (momentum != 0.0f) {
      if (first) {
        buf[i] = d;
      } else {
        buf[i] = buf[i] * momentum + (1.0f - dampening) * d;
      }
      if (nesterov) {
        d += momentum * buf[i];
      } else {
        d = buf[i];
      }
    }
    w[i] += -lr * d;
  }
}

// decay = 1 - lr*weight_decay, step_size = lr/(1-beta1^t) and
// bc2_sqrt = sqrt(1-beta2^t) are computed on the host, as device/cpu does.
extern "C" __global__ void ferry_adamw_step(float* w, const float* g, float* m, float* v, i64 n, float decay,
                                            float beta1, float beta2, float eps, float step_size, float bc2_sqrt) {
  GRID_STRIDE_LOOP(i64, i, n) {
    w[i] *= decay;
    m[i] = m[i] * beta1 + g[i] * (1.0f - beta1);
    v[i] = v[i] * beta2 + (1.0f - beta2) * g[i] * g[i];
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] += -step_size * m[i] / denom;
  }
}
