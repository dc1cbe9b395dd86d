"""Does TensorFlow see the GPU, and run this project's op types on it?"""

import time

import tensorflow as tf

print('tf', tf.__version__, 'cuda build', tf.test.is_built_with_cuda())
gpus = tf.config.list_physical_devices('GPU')
print('GPUs', gpus)
if gpus:
  print(tf.config.experimental.get_device_details(gpus[0]))
tf.debugging.set_log_device_placement(True)
x = tf.random.stateless_normal([8, 32, 32, 16], seed=[1, 2])
k = tf.random.stateless_normal([3, 3, 16, 32], seed=[3, 4])
d = tf.random.stateless_normal([5, 5, 32, 1], seed=[5, 6])
t = time.time()
y = tf.nn.conv2d(x, k, 1, 'SAME')
z = tf.nn.depthwise_conv2d(y, d, [1, 1, 1, 1], 'SAME')
m = tf.matmul(tf.reshape(z, [8, -1]), tf.ones([32 * 32 * 32, 10]))
print('ops ran on', y.device, z.device, m.device, 'first run s', round(time.time() - t, 1))
